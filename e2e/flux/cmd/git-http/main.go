// git-http serves every bare repository under -root over Git's smart HTTP protocol by running
// the system's `git http-backend` as a CGI program, so source-controller clones over HTTP
// from the same git that writes the repositories.
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	root := flag.String("root", "", "directory holding the bare repositories")
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	addrFile := flag.String("addr-file", "", "write the bound address here once listening")
	flag.Parse()
	if *root == "" {
		log.Fatal("git-http: -root is required")
	}
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		log.Fatalf("git-http: git --exec-path: %v", err)
	}
	backend := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + *root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("git-http: %v", err)
	}
	if *addrFile != "" {
		// Write then rename, so a reader never sees a partial address.
		tmp := *addrFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(ln.Addr().String()), 0o644); err != nil {
			log.Fatal(err)
		}
		if err := os.Rename(tmp, *addrFile); err != nil {
			log.Fatal(err)
		}
	}
	log.Printf("git-http: serving %s on http://%s", *root, ln.Addr())
	log.Fatal(http.Serve(ln, backend))
}
