package main

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
)

// fortunesPage builds a fortunes page from rows, escaping as escape says.
func fortunesPage(rows map[int]string, escape func(string) string, sorted bool) string {
	ids := make([]int, 0, len(rows))
	for id := range rows {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		if sorted {
			return rows[ids[i]] < rows[ids[j]]
		}
		return ids[i] < ids[j]
	})
	var b strings.Builder
	b.WriteString("<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr>")
	for _, id := range ids {
		b.WriteString("<tr><td>" + itoa(id) + "</td><td>" + escape(rows[id]) + "</td></tr>")
	}
	b.WriteString("</table></body></html>")
	return b.String()
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func withExtra() map[int]string {
	rows := map[int]string{0: "Additional fortune added at request time."}
	for id, m := range tfbFortunes {
		rows[id] = m
	}
	return rows
}

// PHP's htmlspecialchars(ENT_QUOTES) escapes.
var phpEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#039;").Replace

func TestCheckFortunesAcceptsTechEmpowersPage(t *testing.T) {
	if err := checkFortunes([]byte(fortunesPage(withExtra(), phpEscape, true))); err != nil {
		t.Fatal(err)
	}
}

func TestCheckFortunesRejectsWrongPages(t *testing.T) {
	noExtra := withExtra()
	delete(noExtra, 0)
	cases := map[string]string{
		"not escaped":           fortunesPage(withExtra(), func(s string) string { return s }, true),
		"not sorted":            fortunesPage(withExtra(), phpEscape, false),
		"no fortune added":      fortunesPage(noExtra, phpEscape, true),
		"not the page":          "<html><body>fortunes</body></html>",
		"double escaped":        fortunesPage(withExtra(), func(s string) string { return phpEscape(phpEscape(s)) }, true),
		"markup cut at the end": strings.TrimSuffix(fortunesPage(withExtra(), phpEscape, true), "</html>"),
	}
	for name, page := range cases {
		if err := checkFortunes([]byte(page)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestDecodeWorld(t *testing.T) {
	if w, err := decodeWorld(json.RawMessage(`{"id":7,"randomNumber":9999}`)); err != nil || w.ID != 7 || w.RandomNumber != 9999 {
		t.Fatalf("%v %v", w, err)
	}
	for _, bad := range []string{`{"id":7}`, `{"id":7,"randomnumber":3}`, `{"id":0,"randomNumber":3}`, `{"id":7,"randomNumber":10001}`,
		`{"id":"7","randomNumber":3}`, `[{"id":7,"randomNumber":3}]`, `{"id":7,"randomNumber":3,"x":1}`} {
		if _, err := decodeWorld(json.RawMessage(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
