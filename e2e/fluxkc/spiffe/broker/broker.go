// Package broker stands in for github.com/fluxcd/pkg/spiffe/broker (see the package comment of
// github.com/fluxcd/pkg/spiffe here): a client of the SPIFFE Broker API, which issues JWT-SVIDs
// for Flux objects. New only returns an error; the controller calls it only when
// --spiffe-broker-endpoint or --spiffe-broker-id is set, and the benchmark sets neither.
package broker

import (
	"context"

	"github.com/spiffe/go-spiffe/v2/svid/jwtsvid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/fluxcd/pkg/spiffe"
)

// KubernetesObjectReference names the object a JWT-SVID is issued for.
type KubernetesObjectReference struct {
	Group     string
	Kind      string
	Namespace string
	Name      string
	UID       string
}

// Interface fetches JWT-SVIDs.
type Interface interface {
	FetchJWTSVID(ctx context.Context, object KubernetesObjectReference, audiences []string) (*jwtsvid.SVID, error)
}

// Client is an Interface that holds a connection.
type Client interface {
	Interface
	Close() error
}

// New returns spiffe.ErrNotAvailable.
func New(string, []string, x509svid.Source) (Client, error) {
	return nil, spiffe.ErrNotAvailable
}
