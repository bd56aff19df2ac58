package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestDevBannerHidesThePassword: the banner of `pgtask dev` run on the user's own
// database shows no password, and its commands then read $DATABASE_URL; a URL without
// one is shown as given.
func TestDevBannerHidesThePassword(t *testing.T) {
	for _, tc := range []struct{ url, secret, shown string }{
		{"postgres://alice:s3cret@db.example:5432/app", "s3cret", "postgres://alice:xxxxx@db.example:5432/app"},
		{"postgres://alice@db.example/app?password=s3cret&sslmode=require", "s3cret", "password=xxxxx"},
		{"host=db.example user=alice password=s3cret dbname=app", "s3cret", "password=xxxxx dbname=app"},
		{"host=db.example password='s3 cret' dbname=app", "s3 cret", "password=xxxxx dbname=app"},
	} {
		var out bytes.Buffer
		printDevBanner(&out, "http://127.0.0.1:8080", tc.url, "", nil)
		banner := out.String()
		if strings.Contains(banner, tc.secret) {
			t.Errorf("banner for %q shows the password:\n%s", tc.url, banner)
		}
		// and says to export it: given by --database-url, the URL is not in the environment
		if !strings.Contains(banner, tc.shown) || !strings.Contains(banner, `--database-url "$DATABASE_URL"`) || !strings.Contains(banner, "export it first") {
			t.Errorf("banner for %q lacks %q or commands reading $DATABASE_URL:\n%s", tc.url, tc.shown, banner)
		}
	}
	plain := "postgres://postgres@127.0.0.1:5432/pgtask_dev"
	var out bytes.Buffer
	printDevBanner(&out, "http://127.0.0.1:8080", plain, "", nil)
	if !strings.Contains(out.String(), "--database-url "+shellQuote(plain)) || strings.Contains(out.String(), "hidden") {
		t.Errorf("banner for a URL without a password:\n%s", out.String())
	}
}

// TestDevBannerHidesTheToken: the banner's curl commands read the token from
// $PGTASK_TOKEN rather than show it, and say so.
func TestDevBannerHidesTheToken(t *testing.T) {
	var out bytes.Buffer
	printDevBanner(&out, "http://127.0.0.1:8080", "postgres://postgres@127.0.0.1:5432/pgtask_dev", "s3cret", nil)
	banner := out.String()
	if strings.Contains(banner, "s3cret") || !strings.Contains(banner, `-H "Authorization: Bearer $PGTASK_TOKEN"`) ||
		!strings.Contains(banner, "export it first") {
		t.Errorf("banner with a token shows it, or its commands do not read $PGTASK_TOKEN:\n%s", banner)
	}
	out.Reset()
	printDevBanner(&out, "http://127.0.0.1:8080", "postgres://postgres@127.0.0.1:5432/pgtask_dev", "", nil)
	if strings.Contains(out.String(), "Authorization") || strings.Contains(out.String(), "PGTASK_TOKEN") {
		t.Errorf("banner without a token mentions one:\n%s", out.String())
	}
}
