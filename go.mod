module github.com/peregrinephp/peregrine

go 1.26.8
