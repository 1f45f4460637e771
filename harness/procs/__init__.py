"""Local processes the drills, tests and benchmarks start: free ports, `drill serve`
spawned and waited for, a local Prometheus. One home so each exists once.
"""
