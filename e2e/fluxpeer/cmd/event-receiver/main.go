// Command event-receiver stands in for notification-controller's event endpoint in the
// tests: it decodes every POST with Flux's own event type, refusing unknown fields, and
// appends each accepted event as one JSON line to -out. A refused body is answered 400
// and recorded, with why, in -out plus ".rejected", which the tests require to stay empty.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	out := flag.String("out", "", "file the accepted events are appended to")
	addrFile := flag.String("addr-file", "", "file the listening address is written to once ready")
	flag.Parse()
	if *out == "" {
		log.Fatal("-out is required")
	}

	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	var mu sync.Mutex
	appendLine := func(path string, line []byte) {
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			log.Print(err)
			return
		}
		defer f.Close()
		_, _ = f.Write(append(line, '\n'))
	}

	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		event, err := decode(r, body)
		if err != nil {
			record, _ := json.Marshal(map[string]string{"error": err.Error(), "body": string(body)})
			appendLine(*out+".rejected", record)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		line, _ := json.Marshal(event)
		appendLine(*out, line)
		w.WriteHeader(http.StatusAccepted)
	})

	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(listener.Addr().String()), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	log.Fatal(http.Serve(listener, nil))
}

// decode accepts exactly one eventv1.Event per POST, with the fields Flux's recorder
// always sets, and nothing the type does not know.
func decode(r *http.Request, body []byte) (*eventv1.Event, error) {
	if r.Method != http.MethodPost {
		return nil, fmt.Errorf("method %s, want POST", r.Method)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		return nil, fmt.Errorf("content type %q, want application/json", ct)
	}
	decoder := json.NewDecoder(bytes.NewReader(body))
	decoder.DisallowUnknownFields()
	var event eventv1.Event
	if err := decoder.Decode(&event); err != nil {
		return nil, err
	}
	if decoder.More() {
		return nil, fmt.Errorf("more than one JSON value in the body")
	}
	switch {
	case event.InvolvedObject.Kind == "" || event.InvolvedObject.Name == "" || event.InvolvedObject.Namespace == "":
		return nil, fmt.Errorf("involvedObject needs kind, name and namespace")
	case event.Severity != eventv1.EventSeverityInfo && event.Severity != eventv1.EventSeverityError:
		return nil, fmt.Errorf("severity %q is neither info nor error", event.Severity)
	case event.Timestamp.IsZero():
		return nil, fmt.Errorf("no timestamp")
	case event.Reason == "" || event.Message == "" || event.ReportingController == "":
		return nil, fmt.Errorf("reason, message and reportingController are required")
	}
	return &event, nil
}
