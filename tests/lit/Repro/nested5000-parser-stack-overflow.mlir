// RUN: not mx-opt %s 2>&1 | FileCheck %s
// Was: SIGSEGV (upstream's recursive parser overflows the stack; mlir-opt too).
// The tokenizer refuses nesting deeper than 500 levels (line 501 of the input, + 4 header lines).
// CHECK: nested5000-parser-stack-overflow.mlir:505:8: error: brackets and regions nest deeper than 500 levels
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
module {
func.func @f() {
  return
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
