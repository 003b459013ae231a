// Command logcheck reads controller log lines on stdin and decodes each the way the flux
// CLI's `flux logs` does, then applies its filters. The flux CLI's log-entry struct lives
// in package main of flux2's cmd/flux and cannot be imported, so logEntry below mirrors its
// JSON field names (flux2 v2.9 cmd/flux/logs.go); like flux, decoding allows unknown fields.
//
// It exits 1 if any line is not JSON or does not decode. It prints each line the filters
// keep, in flux's layout, and on stderr how many lines it read and kept.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
)

type logEntry struct {
	Timestamp      string `json:"ts"`
	Level          string `json:"level"`
	Message        string `json:"msg"`
	Error          string `json:"error,omitempty"`
	Logger         string `json:"logger"`
	Kind           string `json:"reconciler kind,omitempty"`
	ControllerKind string `json:"controllerKind,omitempty"`
	Name           string `json:"name,omitempty"`
	Namespace      string `json:"namespace,omitempty"`
}

func main() {
	kind := flag.String("kind", "", "keep lines of this kind (flux logs --kind)")
	name := flag.String("name", "", "keep lines of this object name (flux logs --name)")
	namespace := flag.String("namespace", "flux-system", "keep lines of this namespace (flux logs --namespace)")
	allNamespaces := flag.Bool("all-namespaces", false, "keep every namespace (flux logs -A)")
	level := flag.String("level", "", "keep lines of this level (flux logs --level: debug, info, error)")
	flag.Parse()

	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 16<<20)
	read, kept := 0, 0
	for scanner.Scan() {
		line := scanner.Text()
		read++
		if !strings.HasPrefix(line, "{") {
			fmt.Fprintf(os.Stderr, "logcheck: line %d is not a JSON object: %s\n", read, line)
			os.Exit(1)
		}
		var entry logEntry
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			fmt.Fprintf(os.Stderr, "logcheck: line %d does not decode as flux's log entry: %v: %s\n", read, err, line)
			os.Exit(1)
		}
		if entry.Timestamp == "" || entry.Level == "" || entry.Message == "" {
			fmt.Fprintf(os.Stderr, "logcheck: line %d lacks ts, level or msg: %s\n", read, line)
			os.Exit(1)
		}
		if (*level == "" || *level == entry.Level) &&
			(*kind == "" || strings.EqualFold(*kind, entry.Kind) || strings.EqualFold(*kind, entry.ControllerKind)) &&
			(*name == "" || strings.EqualFold(*name, entry.Name)) &&
			(*allNamespaces || strings.EqualFold(*namespace, entry.Namespace)) {
			kept++
			objectKind := entry.Kind
			if objectKind == "" {
				objectKind = entry.ControllerKind
			}
			object := objectKind
			if entry.Name != "" {
				object += "/" + entry.Name + "." + entry.Namespace
			}
			fmt.Printf("%s %s %s - %s %s\n", entry.Timestamp, entry.Level, object, entry.Message, entry.Error)
		}
	}
	if err := scanner.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "logcheck: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "logcheck: read %d lines, kept %d\n", read, kept)
}
