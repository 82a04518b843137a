#!/usr/bin/env python3
"""Runs several shell commands round-robin (A B C A B C …) so that a noisy minute on a shared VM
hits every command alike, and reports the median wall and CPU (user+sys of the children) time.
usage: interleave.py ROUNDS PREPARE NAME=COMMAND... ; prints JSON {name: {wall, cpu}} on the last line."""
import json, resource, statistics, subprocess, sys, time

rounds, prepare, specs = int(sys.argv[1]), sys.argv[2], [a.split("=", 1) for a in sys.argv[3:]]
samples = {name: {"wall": [], "cpu": []} for name, _ in specs}
for _ in range(rounds):
    for name, command in specs:
        subprocess.run(prepare, shell=True, check=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(command, shell=True, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        samples[name]["wall"].append(wall)
        samples[name]["cpu"].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
result = {n: {k: statistics.median(v) for k, v in s.items()} for n, s in samples.items()}
for n, r in result.items():
    print(f"{n:12} wall median {r['wall']*1000:8.1f} ms   cpu median {r['cpu']*1000:8.1f} ms   ({rounds} rounds)")
print(json.dumps(result), flush=True)
