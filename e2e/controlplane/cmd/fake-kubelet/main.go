// Command fake-kubelet plays the kubelet for the test control plane: it marks pods Running and
// Ready (or Succeeded, for pods that run to completion) so that Deployments roll out and Jobs
// complete without nodes or containers.
//
// A test steers one pod through the annotation fake-kubelet.e2e/behavior on its template:
//
//	fail         containers crash: Running with restarts and not ready; run-to-completion pods Fail
//	never-ready  containers run but never pass readiness
//
// Pods are never bound to a node, so the API server deletes them at once and namespace
// deletion, garbage collection and rollouts never wait for a kubelet.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

const behaviorAnnotation = "fake-kubelet.e2e/behavior"

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "admin kubeconfig")
	workers := flag.Int("workers", 4, "parallel status writers")
	flag.Parse()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("kubeconfig: %v", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	client := kubernetes.NewForConfigOrDie(cfg)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]())
	enqueue := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok {
			queue.Add(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
		}
	}
	pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	log.Printf("fake-kubelet: watching pods")

	for i := 0; i < *workers; i++ {
		go func() {
			for {
				key, shutdown := queue.Get()
				if shutdown {
					return
				}
				pod, err := pods.Lister().Pods(key.Namespace).Get(key.Name)
				if err == nil {
					err = sync(ctx, client, pod)
				}
				if err != nil && !isGone(err) {
					log.Printf("fake-kubelet: %s: %v", key, err)
					queue.AddRateLimited(key)
				} else {
					queue.Forget(key)
				}
				queue.Done(key)
			}
		}()
	}
	<-ctx.Done()
	queue.ShutDown()
}

func isGone(err error) bool {
	return apierrors.IsNotFound(err)
}

// sync writes the status the pod's behaviour calls for, once: a pod already in that state is left alone.
func sync(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) error {
	if pod.DeletionTimestamp != nil {
		return nil
	}
	want := desiredStatus(pod, metav1.Now())
	if sameState(&pod.Status, &want) {
		return nil
	}
	body, err := json.Marshal(map[string]any{"status": want})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	return err
}

func runsToCompletion(pod *corev1.Pod) bool {
	return pod.Spec.RestartPolicy == corev1.RestartPolicyNever || pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure
}

func desiredStatus(pod *corev1.Pod, now metav1.Time) corev1.PodStatus {
	behavior := pod.Annotations[behaviorAnnotation]
	status := corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &now}
	ready := behavior == ""
	if runsToCompletion(pod) {
		ready = false
		if behavior == "fail" {
			status.Phase = corev1.PodFailed
		} else if behavior == "" {
			status.Phase = corev1.PodSucceeded
		}
	}
	condition := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		return corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now}
	}
	status.Conditions = []corev1.PodCondition{
		condition(corev1.PodScheduled, true),
		condition(corev1.PodInitialized, true),
		condition(corev1.ContainersReady, ready),
		condition(corev1.PodReady, ready),
	}
	for _, c := range pod.Spec.Containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: ready}
		started := true
		cs.Started = &started
		switch {
		case status.Phase == corev1.PodSucceeded:
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}
		case status.Phase == corev1.PodFailed:
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", StartedAt: now, FinishedAt: now}
		case behavior == "fail":
			cs.RestartCount = 3
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off restarting failed container"}
		default:
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: now}
		}
		status.ContainerStatuses = append(status.ContainerStatuses, cs)
	}
	for _, c := range pod.Spec.InitContainers {
		done := true
		status.InitContainerStatuses = append(status.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: &done,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}},
		})
	}
	return status
}

// sameState compares what the behaviour decides (phase and readiness), not timestamps.
func sameState(have, want *corev1.PodStatus) bool {
	if have.Phase != want.Phase || len(have.ContainerStatuses) != len(want.ContainerStatuses) {
		return false
	}
	readiness := func(s *corev1.PodStatus) corev1.ConditionStatus {
		for _, c := range s.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status
			}
		}
		return ""
	}
	return readiness(have) == readiness(want)
}
