// Package fetch stands in for Flux's artifact fetcher, whose module the Go module proxy of this
// workplace does not serve. It does what the controller relies on: download the artifact over
// HTTP with retries, check its digest, and untar it with Flux's own tar package.
package fetch

import (
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

// ArchiveFetcher downloads and unpacks artifact tarballs.
type ArchiveFetcher struct {
	retries           int
	maxDownloadSize   int
	untar             []tar.Option
	hostnameOverwrite string
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

// New returns a fetcher with the given options.
func New(opts ...Option) *ArchiveFetcher {
	f := &ArchiveFetcher{log: logr.Discard()}
	for _, o := range opts {
		o(f)
	}
	return f
}

// Fetch downloads archiveURL, checks it against want (algorithm:hex) and untars it into dir.
func (f *ArchiveFetcher) Fetch(archiveURL, want, dir string) error {
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
		err = f.fetchOnce(archiveURL, want, dir)
		if err == nil || errors.Is(err, ErrFileNotFound) || attempt >= f.retries {
			return err
		}
		f.log.V(1).Info("artifact download failed, retrying", "error", err.Error())
		time.Sleep(time.Duration(attempt+1) * time.Second)
	}
}

func (f *ArchiveFetcher) fetchOnce(archiveURL, want, dir string) error {
	resp, err := http.Get(archiveURL)
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
			return fmt.Errorf("computed digest does not match %s", want)
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
