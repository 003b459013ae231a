// Package fetch stands in for Flux's artifact fetcher, whose module the Go module proxy of this
// workplace does not serve. It does what the controller relies on: download the artifact over
// HTTP with retries, check its digest, and untar it with Flux's own tar package. WithTLSConfig
// (SPIFFE mTLS to the artifact server) is kept for the API; the benchmark serves plain HTTP.
package fetch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/fluxcd/pkg/tar"
	"github.com/go-logr/logr"
	"github.com/opencontainers/go-digest"
)

// ErrFileNotFound is returned when the artifact server answers 404.
var ErrFileNotFound = errors.New("artifact not found")

// ErrDigestMismatch is returned when the downloaded artifact does not have the expected digest;
// the controller then requeues, as the source's status may not be updated yet.
var ErrDigestMismatch = errors.New("artifact digest mismatch")

// ArchiveFetcher downloads and unpacks artifact tarballs.
type ArchiveFetcher struct {
	retries           int
	maxDownloadSize   int
	untar             []tar.Option
	hostnameOverwrite string
	tlsConfig         *tls.Config
	log               logr.Logger
}

// Option configures an ArchiveFetcher.
type Option func(*ArchiveFetcher)

func WithRetries(n int) Option            { return func(f *ArchiveFetcher) { f.retries = n } }
func WithMaxDownloadSize(n int) Option    { return func(f *ArchiveFetcher) { f.maxDownloadSize = n } }
func WithUntar(opts ...tar.Option) Option { return func(f *ArchiveFetcher) { f.untar = opts } }
func WithHostnameOverwrite(host string) Option {
	return func(f *ArchiveFetcher) { f.hostnameOverwrite = host }
}
func WithLogger(log logr.Logger) Option { return func(f *ArchiveFetcher) { f.log = log } }
func WithTLSConfig(config *tls.Config) Option {
	return func(f *ArchiveFetcher) { f.tlsConfig = config }
}

// New returns a fetcher with the given options.
func New(opts ...Option) *ArchiveFetcher {
	f := &ArchiveFetcher{log: logr.Discard()}
	for _, o := range opts {
		o(f)
	}
	return f
}

// FetchWithContext downloads archiveURL, checks it against want (algorithm:hex) and untars it
// into dir.
func (f *ArchiveFetcher) FetchWithContext(ctx context.Context, archiveURL, want, dir string) error {
	if f.hostnameOverwrite != "" {
		u, err := url.Parse(archiveURL)
		if err != nil {
			return err
		}
		u.Host = f.hostnameOverwrite
		archiveURL = u.String()
	}
	var err error
	for attempt := 0; ; attempt++ {
		err = f.fetchOnce(ctx, archiveURL, want, dir)
		if err == nil || errors.Is(err, ErrFileNotFound) || errors.Is(err, ErrDigestMismatch) ||
			attempt >= f.retries {
			return err
		}
		f.log.V(1).Info("artifact download failed, retrying", "error", err.Error())
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt+1) * time.Second):
		}
	}
}

func (f *ArchiveFetcher) fetchOnce(ctx context.Context, archiveURL, want, dir string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, archiveURL, nil)
	if err != nil {
		return err
	}
	client := http.DefaultClient
	if f.tlsConfig != nil {
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.TLSClientConfig = f.tlsConfig
		client = &http.Client{Transport: transport}
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("failed to download archive: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("failed to download archive from %s: %w", archiveURL, ErrFileNotFound)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("failed to download archive from %s, status: %s", archiveURL, resp.Status)
	}
	file, err := os.CreateTemp("", "artifact-*.tar.gz")
	if err != nil {
		return err
	}
	defer os.Remove(file.Name())
	defer file.Close()
	body := io.Reader(resp.Body)
	if f.maxDownloadSize > 0 {
		body = io.LimitReader(resp.Body, int64(f.maxDownloadSize)+1)
	}
	size, err := io.Copy(file, body)
	if err != nil {
		return fmt.Errorf("failed to download archive: %w", err)
	}
	if f.maxDownloadSize > 0 && size > int64(f.maxDownloadSize) {
		return fmt.Errorf("artifact is larger than %d bytes", f.maxDownloadSize)
	}
	if want != "" {
		d, err := digest.Parse(want)
		if err != nil {
			return fmt.Errorf("failed to parse digest %q: %w", want, err)
		}
		if _, err := file.Seek(0, io.SeekStart); err != nil {
			return err
		}
		verifier := d.Verifier()
		if _, err := io.Copy(verifier, file); err != nil {
			return err
		}
		if !verifier.Verified() {
			return fmt.Errorf("%w: computed digest does not match %s", ErrDigestMismatch, want)
		}
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := tar.Untar(file, dir, f.untar...); err != nil {
		return fmt.Errorf("failed to extract archive (check whether the artifact is a tarball): %w", err)
	}
	return nil
}
