// Command egressprobe is run by choir.exec in the tests of the egress
// gateway (issue 34). It tries every way out a command has, prints one
// line per attempt with what it got, and never fails: the test reads its
// output from the tool result.
//
//	egressprobe -direct host:port,... -proxy http://...,... -connect host:port,... -dns name,... -udp host:port,...
//
// Lines: "direct <addr>: ok" or ": error <e>" (a TCP connection that
// ignores the proxy variables); "proxy <url>: <status> <body>" (an HTTP
// GET through HTTP_PROXY); "connect <addr>: <status line>" (a CONNECT
// through HTTPS_PROXY); "dns <name>: <addresses>" or ": error <e>";
// "udp <addr>: sent" or ": error <e>"; "env <name>=<value>".
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

func main() {
	direct := flag.String("direct", "", "addresses to dial directly")
	proxied := flag.String("proxy", "", "URLs to GET through the proxy")
	connect := flag.String("connect", "", "addresses to CONNECT to through the proxy")
	dns := flag.String("dns", "", "names to resolve")
	udp := flag.String("udp", "", "addresses to send a UDP datagram to")
	flag.Parse()
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"} {
		fmt.Printf("env %s=%s\n", k, os.Getenv(k))
	}
	for _, a := range split(*direct) {
		c, err := net.DialTimeout("tcp", a, 3*time.Second)
		if err != nil {
			fmt.Printf("direct %s: error %v\n", a, err)
			continue
		}
		c.Close()
		fmt.Printf("direct %s: ok\n", a)
	}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}
	for _, u := range split(*proxied) {
		resp, err := client.Get(u)
		if err != nil {
			fmt.Printf("proxy %s: error %v\n", u, err)
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		fmt.Printf("proxy %s: %d %s\n", u, resp.StatusCode, strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", " "))
	}
	for _, a := range split(*connect) {
		fmt.Printf("connect %s: %s\n", a, connectVia(os.Getenv("HTTPS_PROXY"), a))
	}
	for _, n := range split(*dns) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		addrs, err := net.DefaultResolver.LookupHost(ctx, n)
		cancel()
		if err != nil {
			fmt.Printf("dns %s: error %v\n", n, err)
			continue
		}
		fmt.Printf("dns %s: %v\n", n, addrs)
	}
	for _, a := range split(*udp) {
		c, err := net.Dial("udp", a)
		if err == nil {
			_, err = c.Write([]byte("exfiltrated"))
			c.Close()
		}
		if err != nil {
			fmt.Printf("udp %s: error %v\n", a, err)
			continue
		}
		fmt.Printf("udp %s: sent\n", a)
	}
}

// connectVia asks the proxy for a tunnel and returns its status line.
func connectVia(proxy, addr string) string {
	u, err := url.Parse(proxy)
	if err != nil || u.Host == "" {
		return fmt.Sprintf("error no proxy (%q)", proxy)
	}
	c, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
	if err != nil {
		return "error " + err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return "error " + err.Error()
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", " "))
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
