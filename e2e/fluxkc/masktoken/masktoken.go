// Package masktoken stands in for Flux's module of that name, which the Go module proxy of this
// workplace does not serve. The controller calls only MaskTokenFromString, to hide secret values
// in error messages; the benchmark never reaches that path.
package masktoken

import (
	"errors"
	"strings"
)

// MaskTokenFromString replaces every occurrence of token in message with asterisks.
func MaskTokenFromString(message, token string) (string, error) {
	if token == "" {
		return "", errors.New("empty token")
	}
	return strings.ReplaceAll(message, token, "*****"), nil
}
