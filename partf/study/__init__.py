"""Studies: a plan of partf-train runs over arms and seeds, run and reported (partf-study)."""
