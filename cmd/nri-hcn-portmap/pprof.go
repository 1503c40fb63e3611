package main

import (
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"net/http"
	"net/http/pprof"

	"github.com/sirupsen/logrus"
)

func servePprof(addr string, log *logrus.Entry) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: config.AdminReadHeaderTimeout}
	log.WithField("address", addr).Info("serving Go profiles")
	if err := srv.ListenAndServe(); err != nil {
		log.WithError(err).Error("pprof server stopped")
	}
}
