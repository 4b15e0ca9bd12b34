// Readiness and liveness probes, with kubelet's own probers
// (k8s.io/kubernetes/pkg/probe/http and /tcp) and kubelet's semantics:
// initialDelaySeconds, periodSeconds, timeoutSeconds, successThreshold and
// failureThreshold. A container with a readiness probe is ready after
// successThreshold successes in a row and unready after failureThreshold
// failures; one without is ready once started. The pod's Ready and
// ContainersReady conditions follow, which is what a DaemonSet's surge
// rollout and a Deployment's availability wait for. A liveness probe that
// fails failureThreshold times in a row stops the container (SIGTERM to its
// process group); restarting it is out of this test kubelet's scope, so the
// pod then ends Failed and its controller replaces it. exec probes and gRPC
// probes are refused at start (not supported here).
package main

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/probe"
	httpprobe "k8s.io/kubernetes/pkg/probe/http"
	tcpprobe "k8s.io/kubernetes/pkg/probe/tcp"
)

type probeState struct {
	mu     sync.Mutex
	ready  map[string]bool   // by container name
	killed map[string]string // container -> why the kubelet stopped it
	cancel context.CancelFunc
}

var probeStates sync.Map // pod UID -> *probeState

func stateOf(uid string) *probeState {
	s, _ := probeStates.LoadOrStore(uid, &probeState{ready: map[string]bool{}, killed: map[string]string{}})
	return s.(*probeState)
}

// checkProbes refuses probe kinds this kubelet cannot run.
func checkProbes(c *corev1.Container) error {
	for what, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe,
		"startup": c.StartupProbe} {
		if p == nil {
			continue
		}
		if what == "startup" || p.HTTPGet == nil && p.TCPSocket == nil {
			return fmt.Errorf("container %s: %s probe: only httpGet and tcpSocket readiness/liveness probes are supported by the test kubelet", c.Name, what)
		}
	}
	return nil
}

func runProbe(p *corev1.Probe, c *corev1.Container, ip string) (probe.Result, string) {
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Second
	}
	if p.HTTPGet != nil {
		req, err := httpprobe.NewRequestForHTTPGetAction(p.HTTPGet, c, ip, "probe")
		if err != nil {
			return probe.Unknown, err.Error()
		}
		res, out, err := httpprobe.New(false).Probe(req, timeout)
		if err != nil {
			return probe.Failure, err.Error()
		}
		return res, out
	}
	host := p.TCPSocket.Host
	if host == "" {
		host = ip
	}
	port, err := probe.ResolveContainerPort(p.TCPSocket.Port, c)
	if err != nil {
		return probe.Unknown, err.Error()
	}
	res, out, err := tcpprobe.New().Probe(host, port, timeout)
	if err != nil {
		return probe.Failure, err.Error()
	}
	return res, out
}

// startProbes starts one worker per probe of each container of a started pod.
func (n *node) startProbes(ctx context.Context, r *podRun, pod *corev1.Pod) {
	st := stateOf(string(pod.UID))
	pctx, cancel := context.WithCancel(ctx)
	st.mu.Lock()
	st.cancel = cancel
	st.mu.Unlock()
	ip := podIP(pod)
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.ReadinessProbe != nil {
			go n.probeWorker(pctx, r, pod, i, c.ReadinessProbe, ip, false)
		}
		if c.LivenessProbe != nil {
			go n.probeWorker(pctx, r, pod, i, c.LivenessProbe, ip, true)
		}
	}
}

func (n *node) stopProbes(uid string) {
	if s, ok := probeStates.LoadAndDelete(uid); ok {
		st := s.(*probeState)
		st.mu.Lock()
		if st.cancel != nil {
			st.cancel()
		}
		st.mu.Unlock()
	}
}

func (n *node) probeWorker(ctx context.Context, r *podRun, pod *corev1.Pod, idx int, p *corev1.Probe, ip string,
	liveness bool) {
	logger := klog.FromContext(ctx)
	c := &pod.Spec.Containers[idx]
	period := time.Duration(p.PeriodSeconds) * time.Second
	if period <= 0 {
		period = 10 * time.Second
	}
	success, failure := int(p.SuccessThreshold), int(p.FailureThreshold)
	if success <= 0 || liveness {
		success = 1
	}
	if failure <= 0 {
		failure = 3
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
	}
	st := stateOf(string(pod.UID))
	oks, fails := 0, 0
	for {
		res, out := runProbe(p, c, ip)
		if res == probe.Success || res == probe.Warning {
			oks, fails = oks+1, 0
		} else {
			oks, fails = 0, fails+1
		}
		if liveness {
			if fails >= failure {
				why := fmt.Sprintf("liveness probe failed %d times: %s", fails, out)
				logger.Info("stopping container", "pod", klog.KObj(pod), "container", c.Name, "why", why)
				st.mu.Lock()
				st.killed[c.Name] = why
				st.mu.Unlock()
				n.mu.Lock()
				if idx < len(r.procs) && r.procs[idx].Process != nil {
					_ = syscall.Kill(-r.procs[idx].Process.Pid, syscall.SIGTERM)
				}
				n.mu.Unlock()
				return
			}
		} else {
			st.mu.Lock()
			was := st.ready[c.Name]
			now := was
			if oks >= success {
				now = true
			} else if fails >= failure {
				now = false
			}
			st.ready[c.Name] = now
			st.mu.Unlock()
			if now != was {
				logger.Info("readiness changed", "pod", klog.KObj(pod), "container", c.Name, "ready", now,
					"probe", out)
				n.refreshStatus(ctx, pod)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
	}
}

// containerReady: a running container without a readiness probe is ready;
// one with a probe once the probe says so.
func containerReady(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == name && c.ReadinessProbe == nil {
			return true
		}
	}
	st := stateOf(string(pod.UID))
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ready[name]
}

// fillStatus completes a status the pod loop wrote: addresses, each
// running container's readiness, the Ready and ContainersReady conditions
// (their transition time kept while unchanged), and why a container the
// kubelet stopped was stopped.
func fillStatus(cur *corev1.Pod) {
	if *nodeIP != "" {
		cur.Status.HostIP = *nodeIP
		cur.Status.HostIPs = []corev1.HostIP{{IP: *nodeIP}}
	}
	if ip := podIP(cur); ip != "" && fullSpec() {
		cur.Status.PodIP = ip
		cur.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	if cur.Status.StartTime == nil {
		now := metav1.Now()
		cur.Status.StartTime = &now
	}
	st := stateOf(string(cur.UID))
	all := cur.Status.Phase == corev1.PodRunning && len(cur.Status.ContainerStatuses) > 0
	for i := range cur.Status.ContainerStatuses {
		cs := &cur.Status.ContainerStatuses[i]
		cs.Ready = cs.State.Running != nil && containerReady(cur, cs.Name)
		all = all && cs.Ready
		if t := cs.State.Terminated; t != nil {
			st.mu.Lock()
			if why, ok := st.killed[cs.Name]; ok {
				t.Reason, t.Message = "Unhealthy", why
			}
			st.mu.Unlock()
		}
	}
	status := corev1.ConditionFalse
	if all {
		status = corev1.ConditionTrue
	}
	old := map[corev1.PodConditionType]corev1.PodCondition{}
	for _, c := range cur.Status.Conditions {
		old[c.Type] = c
	}
	var conds []corev1.PodCondition
	for _, t := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		c := corev1.PodCondition{Type: t, Status: status, LastTransitionTime: metav1.Now()}
		if o, ok := old[t]; ok && o.Status == status {
			c.LastTransitionTime = o.LastTransitionTime
		}
		conds = append(conds, c)
	}
	for _, c := range cur.Status.Conditions {
		if c.Type != corev1.PodReady && c.Type != corev1.ContainersReady {
			conds = append(conds, c)
		}
	}
	cur.Status.Conditions = conds
}

// refreshStatus rewrites the pod's status after a readiness change.
func (n *node) refreshStatus(ctx context.Context, pod *corev1.Pod) {
	for attempt := 0; attempt < 5; attempt++ {
		cur, err := n.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || cur.UID != pod.UID {
			return
		}
		fillStatus(cur)
		if _, err = n.cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err == nil ||
			!apierrors.IsConflict(err) {
			return
		}
	}
}
