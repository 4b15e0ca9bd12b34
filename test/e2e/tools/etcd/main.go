// Command cxlkv-etcd runs a single-member etcd for the e2e control plane.
//
// It wraps go.etcd.io/etcd/server/v3/embed so that the etcd version is the one
// the Kubernetes module pins (Debian's etcd is too old for Kubernetes 1.34+).
// Test tooling only: the cxlkv product has no Go code.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		log.Fatalf("parse url %q: %v", s, err)
	}
	return *u
}

func main() {
	dataDir := flag.String("data-dir", "", "directory for etcd data (required)")
	clientURL := flag.String("client-url", "http://127.0.0.1:2379", "URL to serve clients on")
	peerURL := flag.String("peer-url", "http://127.0.0.1:2380", "URL to serve peers on")
	noFsync := flag.Bool("unsafe-no-fsync", true, "skip fsync (test clusters only)")
	flag.Parse()
	if *dataDir == "" {
		log.Fatal("start etcd: --data-dir is required")
	}

	cfg := embed.NewConfig()
	cfg.Name = "cxlkv-e2e"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{mustURL(*clientURL)}
	cfg.AdvertiseClientUrls = cfg.ListenClientUrls
	cfg.ListenPeerUrls = []url.URL{mustURL(*peerURL)}
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = *noFsync
	cfg.LogLevel = "error"

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("start etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("etcd ready")
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		log.Fatal("start etcd: not ready after 60s")
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sig:
		fmt.Printf("etcd stopping on %v\n", s)
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	}
	e.Close()
}
