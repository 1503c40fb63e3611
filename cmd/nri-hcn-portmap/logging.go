package main

import (
	"io"
	"os"
	"path/filepath"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/logfile"
	"github.com/sirupsen/logrus"
)

// defaultServiceLog is where a service logs when log.file is not set.
var defaultServiceLog = filepath.Join(os.Getenv("ProgramData"), "nri-hcn-portmap", "nri-hcn-portmap.log")

func newLogger(cfg config.Log, out io.Writer) (*logrus.Logger, io.Closer, error) {
	l := logrus.New()
	var closer io.Closer = io.NopCloser(nil)
	if cfg.File != "" {
		w, err := logfile.Open(cfg.File, int64(cfg.MaxSizeMB)<<20, cfg.MaxFiles)
		if err != nil {
			return nil, nil, err
		}
		out, closer = w, w
	}
	l.SetOutput(out)
	lvl, err := logrus.ParseLevel(cfg.Level)
	if err != nil {
		return nil, nil, err
	}
	l.SetLevel(lvl)
	if cfg.Format == "json" {
		l.SetFormatter(&logrus.JSONFormatter{})
	} else {
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	}
	return l, closer, nil
}
