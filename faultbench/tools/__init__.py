"""Side tools that reuse the pipeline: doctor, preflight, devices, bench, conformance checks."""
