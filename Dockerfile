# Multi-stage build to minimal non-root images, one per controller, each holding one static
# binary as its entrypoint:
#   docker build --target kustomize-controller -t kustomize-controller .
#   docker build --target image-reflector-controller -t image-reflector-controller .
# (the last stage, kustomize-controller, is the default). One image per controller because a
# Flux user swaps images in Flux's own Deployments, which pass flags only (no command): each
# image's entrypoint must be its controller.
# No Docker engine runs on the development machines; `make static` builds and checks the same
# static binaries without one (see README).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY crates ./crates
COPY crds ./crds
COPY config ./config
# glibc with crt-static gives fully static binaries without a musl toolchain.
ENV RUSTFLAGS="-C target-feature=+crt-static"
RUN cargo build --release --locked --target x86_64-unknown-linux-gnu \
      -p kustomize-controller --bin kustomize-controller \
      -p image-reflector-controller --bin image-reflector-controller \
 && cp target/x86_64-unknown-linux-gnu/release/kustomize-controller /kustomize-controller \
 && cp target/x86_64-unknown-linux-gnu/release/image-reflector-controller /image-reflector-controller

# Flux's image-reflector-controller Deployment passes its flags as args.
FROM gcr.io/distroless/static-debian12:nonroot AS image-reflector-controller
COPY --from=build /image-reflector-controller /usr/local/bin/image-reflector-controller
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/image-reflector-controller"]

FROM gcr.io/distroless/static-debian12:nonroot AS kustomize-controller
COPY --from=build /kustomize-controller /usr/local/bin/kustomize-controller
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kustomize-controller"]
CMD ["run"]
