package fenecdb

// The public surface, checked: the exported names are exactly the agreed API (clients.md §3.3 plus the
// worker helper), and the README's examples are the bodies of the runnable examples.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var agreedAPI = []string{
	"All", "Cmp", "Code", "CodeBadRequest", "CodeConflict", "CodeForbidden", "CodeKeyReused", "CodeNotFound",
	"CodeOf", "CodeStorageFull", "CodeTimeout", "CodeUnauthorized", "CodeUnavailable", "CodeUnmet", "Computed", "Cond",
	"D", "Doc", "Doc.Len", "Doc.MarshalJSON", "Error", "Error.Error", "Expr", "Fields", "From", "Inc", "IsStale",
	"New", "Not", "OpMap", "Ops", "Option", "Or", "And", "Query", "Query.Count", "Query.Delete", "Query.First",
	"Query.Insert", "Query.Limit", "Query.Offset", "Query.Order", "Query.OrWhere", "Query.OrWhereCond",
	"Query.Require", "Query.Rows", "Query.Select", "Query.ToDelete", "Query.ToFenecQL", "Query.ToInsert",
	"Query.ToUpdate", "Query.Update", "Query.Where", "Query.WhereCond", "QueryError", "QueryError.Error", "Raw",
	"Require", "Result", "Returning", "Row", "RowsAs", "Statement", "Stmt", "BatchItem", "BatchResult", "Client",
	"Client.Batch", "Client.Exec", "Client.From", "Client.IdempotencyKey", "Client.Query", "Client.Seq",
	"Client.Wait", "WithHTTPClient", "WithTimeout", "WithToken", "WriteOption", "Job", "Worker", "Worker.Ack",
	"Worker.Claim", "Worker.Enqueue", "Worker.Extend", "Worker.Fail", "Worker.Run", "Worker.Shutdown", "Worker.Close",
	"Event", "WithServers", "WithReadFrom", "ReadFrom", "Primary", "Replica", "Client.URL", "Client.Servers", "Client.Read",
}

func TestExportedNames(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range pkgs["fenecdb"].Files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					got = append(got, d.Name.Name)
					continue
				}
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
					got = append(got, id.Name+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							got = append(got, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								got = append(got, n.Name)
							}
						}
					}
				}
			}
		}
	}
	want := append([]string(nil), agreedAPI...)
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("exported names differ from the agreed API\n got: %v\nwant: %v", got, want)
	}
}

func TestReadmeExamplesAreTheRunnableOnes(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(".", "example_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)<!-- example: (\\w+) -->\n```go\n(.*?)\n```").FindAllSubmatch(readme, -1)
	if len(blocks) < 4 {
		t.Fatalf("the README shows %d examples, want at least 4", len(blocks))
	}
	for _, b := range blocks {
		name, shown := string(b[1]), string(b[2])
		m := regexp.MustCompile("(?sm)^func " + name + "\\(\\) \\{\n(.*?)\n\\}\n").FindSubmatch(src)
		if m == nil {
			t.Errorf("README shows %s, which example_test.go does not have", name)
			continue
		}
		lines := strings.Split(string(m[1]), "\n")
		for i, l := range lines {
			lines[i] = strings.TrimPrefix(l, "\t")
		}
		if body := strings.Join(lines, "\n"); body != shown {
			t.Errorf("README's %s is not the example's body:\n%s\n---\n%s", name, shown, body)
		}
	}
}
