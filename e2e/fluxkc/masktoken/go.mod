module github.com/fluxcd/pkg/masktoken

go 1.24
