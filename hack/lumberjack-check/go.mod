module github.com/nri-hcn-portmap/nri-hcn-portmap/hack/lumberjack-check

go 1.26.8

require (
	github.com/nri-hcn-portmap/nri-hcn-portmap v0.0.0
	gopkg.in/natefinch/lumberjack.v2 v2.2.1
)

replace github.com/nri-hcn-portmap/nri-hcn-portmap => ../..
