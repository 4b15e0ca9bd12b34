// Command cxlkv-fakenodes registers N Node objects with no kubelet behind them
// and keeps them Ready, so the real kube-scheduler binds pods to them.
//
// Each node carries the kubernetes.io/hostname label. Every --heartbeat it
// renews the node's Lease in kube-node-lease and refreshes the Ready
// condition's lastHeartbeatTime, which is what the node lifecycle controller
// in kube-controller-manager checks. Test tooling only.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

func nodeName(prefix string, i int) string { return fmt.Sprintf("%s%d", prefix, i) }

func ensureNode(ctx context.Context, cs kubernetes.Interface, name string) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"cxlkv.dev/fake-node":    "true",
			},
		},
	}
	_, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	return nil
}

func heartbeat(ctx context.Context, cs kubernetes.Interface, name string, leaseSeconds int32) error {
	now := metav1.Now()
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s: %w", name, err)
	}
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node.Status.Capacity = alloc
	node.Status.Allocatable = alloc
	ready := corev1.NodeCondition{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "cxlkv-fakenodes heartbeat", LastHeartbeatTime: now, LastTransitionTime: now,
	}
	replaced := false
	for i, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				ready.LastTransitionTime = c.LastTransitionTime
			}
			node.Status.Conditions[i] = ready
			replaced = true
		}
	}
	if !replaced {
		node.Status.Conditions = append(node.Status.Conditions, ready)
	}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update node status %s: %w", name, err)
	}

	leases := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	micro := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: name,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID,
				}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To(leaseSeconds),
				RenewTime: &micro,
			},
		}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create lease %s: %w", name, err)
		}
		return nil
	} else if err != nil {
		return fmt.Errorf("get lease %s: %w", name, err)
	}
	lease.Spec.RenewTime = &micro
	lease.Spec.HolderIdentity = ptr.To(name)
	lease.Spec.LeaseDurationSeconds = ptr.To(leaseSeconds)
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renew lease %s: %w", name, err)
	}
	return nil
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "admin kubeconfig")
	count := flag.Int("count", 2, "number of fake nodes")
	prefix := flag.String("prefix", "fake-node-", "node name prefix; names are <prefix><index>")
	every := flag.Duration("heartbeat", 10*time.Second, "heartbeat interval")
	readyFile := flag.String("ready-file", "", "touched once every node is registered and Ready")
	flag.Parse()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("load kubeconfig %s: %v", *kubeconfig, err)
	}
	cfg.UserAgent = "cxlkv-fakenodes"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatalf("create client: %v", err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()

	leaseSeconds := int32(40)
	beatAll := func() bool {
		ok := true
		for i := 0; i < *count; i++ {
			name := nodeName(*prefix, i)
			if err := ensureNode(ctx, cs, name); err != nil {
				log.Print(err)
				ok = false
				continue
			}
			if err := heartbeat(ctx, cs, name, leaseSeconds); err != nil {
				log.Print(err)
				ok = false
			}
		}
		return ok
	}
	announced := false
	for {
		if beatAll() && !announced {
			announced = true
			fmt.Printf("%d fake nodes ready\n", *count)
			if *readyFile != "" {
				if err := os.WriteFile(*readyFile, []byte("ready\n"), 0o644); err != nil {
					log.Fatalf("write %s: %v", *readyFile, err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(*every):
		}
	}
}
