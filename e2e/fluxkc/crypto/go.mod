module github.com/fluxcd/pkg/apis/crypto

go 1.24
