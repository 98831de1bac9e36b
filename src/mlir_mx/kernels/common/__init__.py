"""What every kernel family shares: the IR builder, the format codec, exact
widening, the problem (what a kernel computes, the blocked order) and a
schedule's plan for one problem."""
