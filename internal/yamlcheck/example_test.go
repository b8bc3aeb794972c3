package yamlcheck_test

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/vramhq/vram/internal/yamlcheck"
)

func Example() {
	src := "http:\n  mutations: yes\n  read_only: true\n  port: 80\n"
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		fmt.Println(yamlcheck.SyntaxError("vram.yaml", err))
		return
	}
	r := &yamlcheck.Reader{File: "vram.yaml", Where: "in a configuration"}
	top := r.Mapping(doc.Content[0], "", "http")
	if e, ok := top["http"]; ok {
		m := r.Mapping(e.Val, "http", "mutations", "read_only")
		for _, key := range []string{"mutations", "read_only"} {
			if e, ok := m[key]; ok {
				v, ok := r.Bool(e.Val, yamlcheck.Join("http", key))
				fmt.Println(key, v, ok)
			}
		}
	}
	fmt.Println(r.Errs)
	// Output:
	// mutations false false
	// read_only true true
	// vram.yaml:4: http.port: unknown field (known here: mutations, read_only)
	// vram.yaml:2: http.mutations: want true or false, found "yes"
}
