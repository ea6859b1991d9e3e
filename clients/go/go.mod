module fenecdb.dev/go/fenecdb

go 1.22
