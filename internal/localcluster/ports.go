package localcluster

import (
	"fmt"
	"net"
)

// ports are the loopback ports of one start attempt, one per listener.
type ports struct {
	etcdClient, etcdPeer, apiServer, controllerManager, scheduler, kwok int
}

// freeComponentPorts reserves the ports of every component that listens.
func freeComponentPorts() (ports, error) {
	p, err := FreePorts(6)
	if err != nil {
		return ports{}, err
	}
	return ports{etcdClient: p[0], etcdPeer: p[1], apiServer: p[2], controllerManager: p[3], scheduler: p[4], kwok: p[5]}, nil
}

// FreePorts reserves n distinct free loopback TCP ports. All listeners are
// held until every port is chosen, so no port is handed out twice.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
