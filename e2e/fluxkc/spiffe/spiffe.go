// Package spiffe stands in for github.com/fluxcd/pkg/spiffe, which the Go module proxy of this
// workplace does not serve. Flux's kustomize-controller takes from it the names of its SPIFFE
// flags and the mTLS setup for fetching artifacts and sending events.
//
// The flag names are the real ones (they are the controller's command line). BuildTLSConfig
// only returns an error: the controller calls it only when one of those flags is set, and the
// benchmark sets none.
package spiffe

import (
	"crypto/tls"
	"errors"

	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

// Flags of Flux's controllers, as documented in kustomize-controller v1.10's docs/README.md.
const (
	ControllerFlagAuthorizedArtifactServerSPIFFEID = "authorized-artifact-server-spiffe-id"
	ControllerFlagAuthorizedEventServerSPIFFEID    = "authorized-event-server-spiffe-id"
	ControllerFlagSPIFFEBrokerEndpoint             = "spiffe-broker-endpoint"
	ControllerFlagSPIFFEBrokerID                   = "spiffe-broker-id"
)

// ErrNotAvailable is what every SPIFFE path of this stand-in returns.
var ErrNotAvailable = errors.New("SPIFFE is not available in this benchmark build of " +
	"kustomize-controller (github.com/fluxcd/pkg/spiffe is a stand-in)")

// BuildTLSConfig returns ErrNotAvailable.
func BuildTLSConfig(x509svid.Source, ...string) (*tls.Config, error) {
	return nil, ErrNotAvailable
}
