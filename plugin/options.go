package plugin

import (
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// OptionsFrom is the core's options for a configuration, every value from
// it (config.Default holds the defaults, once); the caller adds the
// Observer and the Reporter.
func OptionsFrom(cfg config.Config) (Options, error) {
	policy, err := NodePolicy(cfg.Admission, cfg)
	if err != nil {
		return Options{}, err
	}
	return Options{
		Policy:         request.PolicyOptions{LocalRoutedVIP: cfg.HCN.LocalRoutedVIP, DualStack: cfg.HCN.DualStack},
		Inputs:         Inputs{Annotations: cfg.Plugin.UsesMappings(config.MappingsAnnotations), CRI: cfg.Plugin.UsesMappings(config.MappingsCRI)},
		Limits:         request.Limits{MaxMappings: cfg.Plugin.MaxMappingsPerPod, MaxBytes: cfg.Plugin.MaxAnnotationBytes},
		Admission:      policy,
		Deadline:       cfg.Plugin.Deadline.Duration,
		FailOpen:       cfg.Plugin.FailurePolicy == config.FailOpen,
		RetryMin:       config.SyncRetryMin,
		RetryMax:       cfg.HCN.RetryMax.Duration,
		ShutdownGrace:  cfg.Plugin.ShutdownGrace.Duration,
		HyperVHandlers: cfg.Plugin.HyperVRuntimeHandlers,
		NodeNetwork:    cfg.HyperV.NodeNetworkService != "",
		Workers:        config.SyncWorkers,
		LateBound:      config.LateCallTimeouts * cfg.HCN.CallTimeout.Duration,
		// the node's own programs' ports are never taken, whatever the
		// admission rules allow (issue 56): no setting turns it off
		Sockets: hostsockets.OS{Probe: true},
	}, nil
}

// NodePolicy is the node's admission policy: the rules of adm (the
// configuration's, or a reload's) with what the running configuration
// fixes until a restart: dual stack, and the plugin's own ports, which no
// pod may map.
func NodePolicy(adm config.Admission, running config.Config) (*admission.Policy, error) {
	policy, err := admission.Compile(adm)
	if err != nil {
		return nil, err
	}
	return policy.WithDualStack(running.HCN.DualStack).WithOwnPorts(running.Admin.OwnPorts()).WithNetworkPolicy(running.Admission.NetworkPolicy), nil
}

// ManagerConfig is the HCN manager's configuration for a configuration's
// [hcn] section.
func ManagerConfig(cfg config.HCN) hcn.ManagerConfig {
	return hcn.ManagerConfig{
		Network: hcn.NetworkSpec{Name: cfg.Network, Type: hcn.NetworkType(cfg.NetworkType), Subnet: cfg.Subnet,
			Gateway: cfg.Gateway, Adapter: cfg.Adapter},
		CreateNetwork:   cfg.CreateNetwork,
		Prefix:          config.EndpointPrefix,
		ListingAttempts: config.HNSListingAttempts,
		OutboundNAT:     cfg.OutboundNAT,
		IPv6:            cfg.DualStack,
		DefaultRoute:    hcn.RouteMode(cfg.DefaultRoute),
		RouteMetric:     uint16(cfg.RouteMetric),
		AllowCNINetwork: cfg.AllowCNINetwork,
		ClusterRanges:   hcn.Prefixes(cfg.ClusterRanges),
		AllowOverlap:    cfg.AllowSubnetOverlap,
	}
}
