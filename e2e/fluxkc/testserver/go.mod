module github.com/fluxcd/pkg/testserver

go 1.24
