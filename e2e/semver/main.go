// The oracle for the ImagePolicy engine's differential test: the libraries Flux's
// image-reflector-controller uses (Masterminds/semver, fluxcd/pkg/version, Go's regexp and
// strconv), called directly. Each stdin line is a JSON array [op, args...]; each stdout
// line is a JSON array of strings answering it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"

	"github.com/Masterminds/semver/v3"
	"github.com/fluxcd/pkg/version"
)

func answer(q []string) []string {
	switch q[0] {
	case "constraint": // range
		if _, err := semver.NewConstraint(q[1]); err != nil {
			return []string{"error", err.Error()}
		}
		return []string{"ok"}
	case "check": // range, version (lenient NewVersion)
		c, err := semver.NewConstraint(q[1])
		if err != nil {
			return []string{"error", err.Error()}
		}
		v, err := semver.NewVersion(q[2])
		if err != nil {
			return []string{"bad version"}
		}
		return []string{strconv.FormatBool(c.Check(v))}
	case "tag": // tag as Flux parses it
		v, err := version.ParseVersion(q[1])
		if err != nil {
			return []string{"skip"}
		}
		return []string{fmt.Sprintf("%d.%d.%d", v.Major(), v.Minor(), v.Patch()), v.Prerelease()}
	case "compare": // a, b (lenient)
		a, errA := semver.NewVersion(q[1])
		b, errB := semver.NewVersion(q[2])
		if errA != nil || errB != nil {
			return []string{"bad version"}
		}
		return []string{strconv.Itoa(a.Compare(b))}
	case "regexp": // pattern
		if _, err := regexp.Compile(q[1]); err != nil {
			return []string{"error", err.Error()}
		}
		return []string{"ok"}
	case "expand": // pattern, template, tag
		re := regexp.MustCompile(q[1])
		m := re.FindStringSubmatchIndex(q[3])
		if m == nil {
			return []string{"no match"}
		}
		return []string{"match", string(re.ExpandString(nil, q[2], q[3], m))}
	case "float":
		f, err := strconv.ParseFloat(q[1], 64)
		if err != nil {
			return []string{"error"}
		}
		return []string{strconv.FormatFloat(f, 'g', -1, 64)}
	}
	return []string{"unknown op " + q[0]}
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		var q []string
		if err := json.Unmarshal(in.Bytes(), &q); err != nil || len(q) == 0 {
			fmt.Fprintf(os.Stderr, "semver-oracle: bad query %q\n", in.Text())
			os.Exit(2)
		}
		b, _ := json.Marshal(answer(q))
		out.Write(append(b, '\n'))
	}
}
