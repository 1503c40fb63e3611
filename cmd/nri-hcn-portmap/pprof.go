package main

import (
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/sirupsen/logrus"
)

func servePprof(addr string, log *logrus.Entry) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.WithField("address", addr).Info("serving Go profiles")
	if err := srv.ListenAndServe(); err != nil {
		log.WithError(err).Error("pprof server stopped")
	}
}
