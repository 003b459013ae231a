// Package testserver stands in for github.com/fluxcd/pkg/testserver, which the Go module proxy
// of this workplace does not serve. Only the tests of Flux's kustomize-controller import it; this
// empty package lets `go mod tidy` resolve that import. The tests are never built here, so
// nothing else is needed.
package testserver
