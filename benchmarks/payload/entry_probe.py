import time

print(f"BENCH first_line={time.time():.6f}", flush=True)  # when user code starts: what figure 1 measures
