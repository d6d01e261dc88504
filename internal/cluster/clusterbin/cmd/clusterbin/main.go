// Command clusterbin builds the cluster-mode test binaries into their
// content-keyed cache (see package clusterbin) unless they are there, and
// prints the directory holding them. `make unit` starts it in the
// background so that the build overlaps with the other tests.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/minilet/minilet/internal/cluster/clusterbin"
)

func main() {
	keyOnly := flag.Bool("key", false, "print the cache key and what went into it, and build nothing")
	kubelet := flag.Bool("kubelet", false, "the upstream kubelet instead of the control plane (for the side-by-side benchmark only; not part of the tests)")
	conformance := flag.Bool("conformance", false, "the conformance harness's e2e.test, agnhost and ginkgo instead of the control plane (for `make conformance` only; not part of the tests)")
	flag.Parse()
	keyf, ensure := clusterbin.Key, clusterbin.Ensure
	switch {
	case *kubelet && *conformance:
		log.Fatal("-kubelet and -conformance exclude each other")
	case *kubelet:
		keyf, ensure = clusterbin.KubeletKey, clusterbin.EnsureKubelet
	case *conformance:
		keyf, ensure = clusterbin.ConformanceKey, clusterbin.EnsureConformance
	}
	log.SetFlags(log.Ltime)
	log.SetPrefix("clusterbin: ")
	if *keyOnly {
		key, inputs, err := keyf()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("key: %s\n%s", key, inputs)
		return
	}
	set, err := ensure(log.Printf)
	if err != nil {
		log.Print(err)
		os.Exit(1)
	}
	fmt.Println(set.Dir)
}
