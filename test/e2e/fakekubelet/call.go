// The "call" mode of cxlkv-fakekubelet: one NodePrepareResources or
// NodeUnprepareResources call on a DRA plugin's socket through kubelet's own
// generated gRPC client (k8s.io/kubelet/pkg/apis/dra/v1), for tests that
// must send what a well-behaved kubelet never sends (a claim UID that is not
// the claim's: kubelet's DRA manager refuses that itself before calling the
// plugin), or that a 1.37 kubelet never sends (the v1beta1 service, which
// it uses only when a plugin does not offer v1). Prints the response as
// JSON on stdout. `health` reads the DRAResourceHealth stream instead (v1,
// which kubelet uses, or v1alpha1, which it falls back to) and prints the
// first --messages responses, one JSON line each (protojson: enum names).
//
//	cxlkv-fakekubelet call prepare|unprepare --socket PATH --namespace NS --name N --uid U [--api v1beta1]
//	cxlkv-fakekubelet call health --socket PATH [--api v1alpha1] [--messages N]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	healthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	healthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
)

func callMain(args []string) int {
	if len(args) < 1 || (args[0] != "prepare" && args[0] != "unprepare" && args[0] != "health") {
		fmt.Fprintln(os.Stderr, "usage: cxlkv-fakekubelet call prepare|unprepare|health --socket PATH ...")
		return 2
	}
	if args[0] == "health" {
		return healthMain(args[1:])
	}
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	socket := fs.String("socket", "", "the plugin's DRA service socket")
	ns := fs.String("namespace", "default", "claim namespace")
	name := fs.String("name", "", "claim name")
	uid := fs.String("uid", "", "claim UID to send")
	timeout := fs.Duration("timeout", 45*time.Second, "per call (kubelet's fixed DRA timeout)")
	api := fs.String("api", "v1", "the DRAPlugin service version: v1 or v1beta1")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *socket == "" || *name == "" || *uid == "" || (*api != "v1" && *api != "v1beta1") {
		fmt.Fprintln(os.Stderr, "call: --socket, --name and --uid are required; --api is v1 or v1beta1")
		return 2
	}
	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "call: dial %s: %v\n", *socket, err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var out any
	if *api == "v1" {
		client := drapb.NewDRAPluginClient(conn)
		claims := []*drapb.Claim{{Namespace: *ns, Name: *name, Uid: *uid}}
		if args[0] == "prepare" {
			out, err = client.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: claims})
		} else {
			out, err = client.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: claims})
		}
	} else {
		client := drapbv1beta1.NewDRAPluginClient(conn)
		claims := []*drapbv1beta1.Claim{{Namespace: *ns, Name: *name, Uid: *uid}}
		if args[0] == "prepare" {
			out, err = client.NodePrepareResources(ctx, &drapbv1beta1.NodePrepareResourcesRequest{Claims: claims})
		} else {
			out, err = client.NodeUnprepareResources(ctx, &drapbv1beta1.NodeUnprepareResourcesRequest{Claims: claims})
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "call: %s: %v\n", args[0], err)
		return 1
	}
	b, err := json.Marshal(out)
	if err != nil {
		fmt.Fprintf(os.Stderr, "call: encode: %v\n", err)
		return 1
	}
	fmt.Println(string(b))
	return 0
}

func healthMain(args []string) int {
	fs := flag.NewFlagSet("call health", flag.ContinueOnError)
	socket := fs.String("socket", "", "the plugin's DRA service socket")
	api := fs.String("api", "v1", "the DRAResourceHealth service version: v1 or v1alpha1")
	messages := fs.Int("messages", 1, "responses to print before closing the stream")
	timeout := fs.Duration("timeout", 30*time.Second, "for the whole stream")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *socket == "" || (*api != "v1" && *api != "v1alpha1") || *messages < 1 {
		fmt.Fprintln(os.Stderr, "call health: --socket is required; --api is v1 or v1alpha1; --messages >= 1")
		return 2
	}
	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "call health: dial %s: %v\n", *socket, err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var recv func() (proto.Message, error)
	if *api == "v1" {
		st, err := healthv1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &healthv1.NodeWatchResourcesRequest{})
		if err != nil {
			fmt.Fprintf(os.Stderr, "call health: %v\n", err)
			return 1
		}
		recv = func() (proto.Message, error) { return st.Recv() }
	} else {
		st, err := healthv1alpha1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &healthv1alpha1.NodeWatchResourcesRequest{})
		if err != nil {
			fmt.Fprintf(os.Stderr, "call health: %v\n", err)
			return 1
		}
		recv = func() (proto.Message, error) { return st.Recv() }
	}
	for i := 0; i < *messages; i++ {
		m, err := recv()
		if err != nil {
			fmt.Fprintf(os.Stderr, "call health: receive: %v\n", err)
			return 1
		}
		b, err := protojson.Marshal(m)
		if err != nil {
			fmt.Fprintf(os.Stderr, "call health: encode: %v\n", err)
			return 1
		}
		fmt.Println(string(b))
	}
	return 0
}
