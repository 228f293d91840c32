// Prints the MSK IAM OAUTHBEARER token that AWS's SigV4 presigner makes for fixed
// inputs, so kpress's own signer can be compared with it byte for byte.
//
// Usage: go-msk-signer REGION ACCESS_KEY SECRET_KEY SESSION_TOKEN UNIX_SECONDS USER_AGENT
// (SESSION_TOKEN may be empty).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

func main() {
	if len(os.Args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: go-msk-signer REGION ACCESS_KEY SECRET_KEY SESSION_TOKEN UNIX_SECONDS USER_AGENT")
		os.Exit(2)
	}
	region, access, secret, session := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	seconds, err := strconv.ParseInt(os.Args[5], 10, 64)
	if err != nil {
		fail(err)
	}
	userAgent := os.Args[6]

	endpoint := url.URL{Scheme: "https", Host: "kafka." + region + ".amazonaws.com", Path: "/"}
	query := url.Values{}
	query.Set("Action", "kafka-cluster:Connect")
	query.Set("X-Amz-Expires", "900")
	endpoint.RawQuery = query.Encode()
	req, err := http.NewRequest(http.MethodGet, endpoint.String(), nil)
	if err != nil {
		fail(err)
	}
	empty := sha256.Sum256(nil)
	creds := aws.Credentials{AccessKeyID: access, SecretAccessKey: secret, SessionToken: session}
	signed, _, err := v4.NewSigner().PresignHTTP(context.Background(), creds, req,
		hex.EncodeToString(empty[:]), "kafka-cluster", region, time.Unix(seconds, 0).UTC())
	if err != nil {
		fail(err)
	}
	withAgent, err := url.Parse(signed)
	if err != nil {
		fail(err)
	}
	q := withAgent.Query()
	q.Add("User-Agent", userAgent)
	withAgent.RawQuery = q.Encode()
	fmt.Print(base64.RawURLEncoding.EncodeToString([]byte(withAgent.String())))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
