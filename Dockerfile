# Multi-stage build to a minimal non-root image holding one static binary.
# No Docker engine runs on the development machines; `make static` builds and checks the same
# static binary without one (see README).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY crates ./crates
COPY crds ./crds
COPY config ./config
# glibc with crt-static gives a fully static binary without a musl toolchain.
ENV RUSTFLAGS="-C target-feature=+crt-static"
RUN cargo build --release --locked --bin kustomize-controller --target x86_64-unknown-linux-gnu \
 && cp target/x86_64-unknown-linux-gnu/release/kustomize-controller /kustomize-controller

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /kustomize-controller /usr/local/bin/kustomize-controller
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kustomize-controller"]
CMD ["run"]
