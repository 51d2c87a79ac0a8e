package bootstrap

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestMemStoreSetGet(t *testing.T) {
	s := NewMemStore()
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	value := []byte("10.0.0.1:4242")
	if err := s.Set(ctx, "tcp/addr/0", value); err != nil {
		t.Fatal(err)
	}
	value[0] = 'X' // the store must have kept its own copy
	got, err := s.Get(ctx, "tcp/addr/0")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "10.0.0.1:4242" {
		t.Fatalf("Get = %q, want %q", got, "10.0.0.1:4242")
	}
	if err := s.Set(ctx, "tcp/addr/0", []byte("again")); err == nil {
		t.Fatal("second Set of the same key succeeded")
	}
}

func TestMemStoreGetWaitsForSet(t *testing.T) {
	s := NewMemStore()
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	got := make(chan string, 1)
	go func() {
		v, err := s.Get(ctx, "k")
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(v)
	}()
	select {
	case v := <-got:
		t.Fatalf("Get returned %q before Set", v)
	case <-time.After(20 * time.Millisecond):
	}
	if err := s.Set(ctx, "other", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if v != "v" {
			t.Fatalf("Get = %q, want %q", v, "v")
		}
	case <-ctx.Done():
		t.Fatal("Get did not return after Set")
	}
}

func TestMemStoreGetHonoursContext(t *testing.T) {
	s := NewMemStore()
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := s.Get(ctx, "missing")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get error = %v, want deadline exceeded", err)
	}
}

func TestMemStoreCloseWakesGet(t *testing.T) {
	s := NewMemStore()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := s.Get(ctx, "missing")
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	s.Close()
	s.Close() // idempotent
	select {
	case err := <-errc:
		if !errors.Is(err, ErrStoreClosed) {
			t.Fatalf("Get error = %v, want ErrStoreClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("Get did not return after Close")
	}
	if err := s.Set(ctx, "k", nil); !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("Set after Close = %v, want ErrStoreClosed", err)
	}
}
