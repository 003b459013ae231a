module github.com/fluxcd/pkg/http/fetch

go 1.24

require (
	github.com/fluxcd/pkg/tar v1.2.0
	github.com/go-logr/logr v1.4.3
	github.com/opencontainers/go-digest v1.0.0
)
