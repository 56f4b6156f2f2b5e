// Command etcd runs a single-member etcd on loopback for the API-server tests.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "directory for the etcd data (required)")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "loopback URL for clients")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "loopback URL for peers")
	flag.Parse()
	if *dataDir == "" {
		log.Fatal("etcd: -data-dir is required")
	}
	if err := run(*dataDir, *clientURL, *peerURL); err != nil {
		log.Fatal(err)
	}
}

func run(dataDir, clientURL, peerURL string) error {
	cu, err := url.Parse(clientURL)
	if err != nil {
		return fmt.Errorf("etcd: -listen-client-url: %w", err)
	}
	pu, err := url.Parse(peerURL)
	if err != nil {
		return fmt.Errorf("etcd: -listen-peer-url: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Dir = dataDir
	cfg.Name = "test"
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = true // test data; durability is not the point
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcd: start: %w", err)
	}
	defer e.Close()
	<-e.Server.ReadyNotify()
	fmt.Println("etcd ready on", cu.String())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sig:
		return nil
	case err := <-e.Err():
		return err
	}
}
