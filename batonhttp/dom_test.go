package batonhttp

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

// node is an element of a page parsed by parseHTML: enough of a DOM to
// find tables and links without golang.org/x/net/html, which the module
// does not depend on.
type node struct {
	tag      string
	attrs    map[string]string
	children []*node
	text     string // a text node's data; "" for elements
}

// parseHTML parses an HTML page with encoding/xml in non-strict mode,
// which closes void elements (meta, input) and knows HTML's entities. It
// suits our pages and Chromium's serialization of them, not HTML at
// large.
func parseHTML(t testing.TB, page []byte) *node {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(page))
	d.Strict, d.AutoClose, d.Entity = false, xml.HTMLAutoClose, xml.HTMLEntity
	root := &node{tag: "#document"}
	stack := []*node{root}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return root
		}
		if err != nil {
			t.Fatalf("parse HTML: %v\n%s", err, page)
		}
		top := stack[len(stack)-1]
		switch tok := tok.(type) {
		case xml.StartElement:
			n := &node{tag: strings.ToLower(tok.Name.Local), attrs: map[string]string{}}
			for _, a := range tok.Attr {
				n.attrs[strings.ToLower(a.Name.Local)] = a.Value
			}
			top.children = append(top.children, n)
			stack = append(stack, n)
		case xml.EndElement:
			// Pop to the matching element; a stray end tag is ignored.
			for i := len(stack) - 1; i > 0; i-- {
				if stack[i].tag == strings.ToLower(tok.Name.Local) {
					stack = stack[:i]
					break
				}
			}
		case xml.CharData:
			top.children = append(top.children, &node{text: string(tok)})
		}
	}
}

// find returns the first element, depth first, for which ok is true.
func (n *node) find(ok func(*node) bool) *node {
	for _, c := range n.children {
		if c.tag != "" && ok(c) {
			return c
		}
		if m := c.find(ok); m != nil {
			return m
		}
	}
	return nil
}

// all returns every element named tag under n, depth first.
func (n *node) all(tag string) []*node {
	var out []*node
	for _, c := range n.children {
		if c.tag == tag {
			out = append(out, c)
		}
		out = append(out, c.all(tag)...)
	}
	return out
}

func (n *node) byID(id string) *node {
	return n.find(func(m *node) bool { return m.attrs["id"] == id })
}

// textContent is the text of n and its descendants, as the DOM's.
func (n *node) textContent() string {
	if n.tag == "" {
		return n.text
	}
	var b strings.Builder
	for _, c := range n.children {
		b.WriteString(c.textContent())
	}
	return b.String()
}

// cell is one th or td of a table row.
type cell struct {
	text  string // trimmed text content
	href  string // the first link's href, if any
	title string // the cell's title attribute
}

// table returns the rows of the table with id, header rows included; it
// fails the test if there is none. tbody elements (which a browser adds)
// are looked through.
func (n *node) table(t testing.TB, id string) [][]cell {
	t.Helper()
	tb := n.byID(id)
	if tb == nil || tb.tag != "table" {
		t.Fatalf("no table with id %q", id)
	}
	var rows [][]cell
	for _, tr := range tb.all("tr") {
		var row []cell
		for _, c := range tr.children {
			if c.tag != "td" && c.tag != "th" {
				continue
			}
			cl := cell{text: strings.TrimSpace(c.textContent()), title: c.attrs["title"]}
			if a := c.find(func(m *node) bool { return m.tag == "a" }); a != nil {
				cl.href = a.attrs["href"]
			}
			row = append(row, cl)
		}
		rows = append(rows, row)
	}
	return rows
}

// texts returns the text of each cell of row.
func texts(row []cell) []string {
	out := make([]string, len(row))
	for i, c := range row {
		out[i] = c.text
	}
	return out
}
