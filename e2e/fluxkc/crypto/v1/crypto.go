// Package v1 stands in for github.com/fluxcd/pkg/apis/crypto/v1, which the Go module proxy of
// this workplace does not serve. Flux's kustomize-controller and github.com/fluxcd/pkg/auth use
// it to turn ServiceAccount annotations and kubeconfig ConfigMaps into the settings of cloud
// workload identity (AWS, Azure, GCP, SPIFFE, Vault logins).
//
// This stand-in has the names the controller and the auth module compile against and nothing
// behind them: BuildSpec gives an empty spec when no workload identity is asked for (so SOPS
// decryption with age or PGP keys still works) and an error otherwise, and every helper for a
// cloud provider returns that error or an empty value. The benchmark never reaches those
// paths: it decrypts nothing and uses no remote kubeconfig.
package v1

import (
	"errors"
	"strings"
	"time"
)

// ErrNotAvailable is what every workload identity path of this stand-in returns.
var ErrNotAvailable = errors.New("workload identity is not available in this benchmark build of " +
	"kustomize-controller (github.com/fluxcd/pkg/apis/crypto is a stand-in)")

// Service providers.
const (
	ProviderAWS     = "aws"
	ProviderAzure   = "azure"
	ProviderGCP     = "gcp"
	ProviderGeneric = "generic"
)

// Credential providers and types.
const (
	CredentialProviderKubernetes = "kubernetes"
	CredentialProviderSPIFFE     = "spiffe"
	CredentialTypeJWT            = "jwt"
	CredentialTypeX509           = "x509"
)

// Defaults the providers of github.com/fluxcd/pkg/auth fall back to.
const (
	DefaultAudienceAWS   = "sts.amazonaws.com"
	DefaultAudienceAzure = "api://AzureADTokenExchange"
	RegistryAWSPublicECR = "public.ecr.aws"
)

// Spec is the validated configuration; Auth is nil when no workload identity is configured.
type Spec struct {
	Auth *AuthSpec
}

// AuthSpec holds the settings of each kind of workload identity.
type AuthSpec struct {
	Credential    *CredentialSpec
	AWS           *AWSSpec
	Azure         *AzureSpec
	GCP           *GCPSpec
	DockerHub     *DockerHubSpec
	TransitEngine *TransitEngineSpec
}

// OptedIn reports whether a credential provider was chosen explicitly.
func (a *AuthSpec) OptedIn() bool {
	return a != nil && a.Credential != nil && a.Credential.Provider != ""
}

type CredentialSpec struct {
	Provider   string
	Type       string
	Expiration time.Duration
	Username   string
	Audiences  []string
}

type AWSSpec struct {
	RoleARN     string
	STSEndpoint string
	Cluster     *AWSClusterSpec
}

type AWSClusterSpec struct {
	Region string
	Name   string
}

type AzureSpec struct {
	TenantID string
	ClientID string
	Cluster  *AzureClusterSpec
}

type AzureClusterSpec struct {
	SubscriptionID string
	ResourceGroup  string
	Name           string
}

type GCPSpec struct {
	WorkloadIdentityProvider string
	ServiceAccount           string
}

type DockerHubSpec struct {
	OIDCConnectionID string
}

type TransitEngineSpec struct {
	LoginPath string
	Role      string
}

type options struct {
	identity bool
}

// Option configures BuildSpec.
type Option func(*options)

// WithAnnotations passes a ServiceAccount's annotations; only Flux's own auth annotations
// (`*.auth.fluxcd.io/*`) ask for workload identity here.
func WithAnnotations(annotations map[string]string) Option {
	return func(o *options) {
		for key := range annotations {
			if strings.Contains(key, "auth.fluxcd.io/") {
				o.identity = true
			}
		}
	}
}

// WithServiceProvider asks for a cloud provider's settings.
func WithServiceProvider(provider string) Option {
	return func(o *options) { o.identity = o.identity || provider != "" }
}

// WithSOPSVaultConfigMap asks for Vault logins configured by --sops-vault-configmap.
func WithSOPSVaultConfigMap() Option { return func(o *options) { o.identity = true } }

// WithKubeConfigCluster asks for a remote cluster's settings.
func WithKubeConfigCluster(cluster string) Option {
	return func(o *options) { o.identity = o.identity || cluster != "" }
}

// WithKubeConfigAudiences asks for the audiences of a remote cluster's tokens.
func WithKubeConfigAudiences(audiences string) Option {
	return func(o *options) { o.identity = o.identity || audiences != "" }
}

// WithOCI asks for registry settings.
func WithOCI(oci bool) Option { return func(o *options) { o.identity = o.identity || oci } }

// BuildSpec returns an empty spec when no workload identity is asked for, else ErrNotAvailable.
func BuildSpec(opts ...Option) (*Spec, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.identity {
		return nil, ErrNotAvailable
	}
	return &Spec{}, nil
}

func GetDefaultAudienceGCP(string) string                  { return "" }
func GetAWSRoleSessionName(_, _, _ string) string          { return "" }
func GetAWSRegionFromArtifactRegistryInput(string) string  { return "" }
func GetAWSRegionFromCodeCommitURL(string) (string, error) { return "", ErrNotAvailable }
func ParseArtifactRepository(_, _ string) (string, error)  { return "", ErrNotAvailable }
func ParseGitRepository(_, _ string) (string, error)       { return "", ErrNotAvailable }
func GetRegistryFromArtifactRepository(string) (string, error) {
	return "", ErrNotAvailable
}
func ParseClusterAddress(string) (string, error) { return "", ErrNotAvailable }
