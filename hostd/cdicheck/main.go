// cdicheck: test tooling for cxlkv-hostd. Loads the CDI specs in a directory
// with the reference CDI implementation (tags.cncf.io/container-device-
// interface), fails on any spec error, injects the named devices into an
// empty OCI runtime spec and prints the result as JSON.
//
//	cdicheck -spec-dir DIR cxlkv.dev/region=ID [...]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

func main() {
	specDir := flag.String("spec-dir", "/var/run/cdi", "CDI spec directory")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "cdicheck: name at least one device (vendor/class=name)")
		os.Exit(2)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(*specDir), cdi.WithAutoRefresh(false))
	if err != nil {
		fmt.Fprintf(os.Stderr, "cdicheck: load specs %s: %v\n", *specDir, err)
		os.Exit(1)
	}
	bad := false
	for path, errs := range cache.GetErrors() {
		for _, e := range errs {
			fmt.Fprintf(os.Stderr, "cdicheck: spec %s: %v\n", path, e)
			bad = true
		}
	}
	if bad {
		os.Exit(1)
	}
	spec := &oci.Spec{Version: oci.Version, Process: &oci.Process{}, Linux: &oci.Linux{}}
	unresolved, err := cache.InjectDevices(spec, flag.Args()...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cdicheck: inject %v (unresolved %v): %v\n", flag.Args(), unresolved, err)
		os.Exit(1)
	}
	out, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		fmt.Fprintf(os.Stderr, "cdicheck: encode OCI spec: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
