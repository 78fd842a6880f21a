"""The commented starting file that ``hacfg init`` writes."""

from __future__ import annotations

from hacfg.scenario import modelarts as ma

_TEMPLATE = """\
# hacfg scenario file. `hacfg lint` checks it; `hacfg build` turns it into a ModelArts job request.
# Whatever is not set here comes from the '{scenario}' preset: `hacfg build --only annotations {scenario}`.
# Editor completion: `hacfg schema -o hacfg.schema.json`, then keep the next line.
# yaml-language-server: $schema=hacfg.schema.json
version: 1
scenario: {scenario}        # single-node | multi-node | llm-long-term
platform: huaweicloud       # huaweicloud | otc (OTC allows 1-3 restarts)
job:
  name: my-training-job     # metadata.name: 1-64 characters of A-Z a-z 0-9 _ -
  nodes: {nodes}
  accelerator: gpu          # gpu | npu | cpu
  network: ethernet         # infiniband | roce | ethernet
  # What runs and where: replace these examples with your own (the API refuses a job without them).
  image: org/train:1.0      # algorithm.engine.image_url: your image in SWR, org/image:tag
  command: bash run.sh      # algorithm.command: what the container starts
  flavor: modelarts.pool.visual.8xlarge   # spec.resource.flavor_id: 8 GPUs per node
  # pool: pool-1234         # spec.resource.pool_id, for a dedicated pool
  # environment: {{NCCL_DEBUG: INFO}}
  # duration: 30d           # compute time the run needs, failures aside: `hacfg plan` forecasts it
# Only you know these three: no preset supplies them. Confirm each against your training script.
checkpoint:
  path: /home/ma-user/modelarts/outputs/train_url_0  # where it saves: the output channel, or shared storage
  interval: {interval}              # how often the training script saves
  resume: true              # the script reloads the newest checkpoint at start-up
  # save_time: 5m           # how long one save holds up training (`hacfg plan`, HA011)
# restart:                  # the '{scenario}' preset's values; uncomment to change
#   max: {max:<18} # fault-tolerance/job-retry-num (0 = auto restart off)
#   unconditional: {unconditional:<8} # restart on any failure, at most 3 in a row
#   on_hang: {on_hang:<14} # restart upon suspension, at most 3 in a row, not counted
#   pod_reschedules: {pod_reschedules:<6} # fault-tolerance/pod-retry-num
# hang:
#   timeout: 30m            # MA_HANG_DETECT_TIME, whole minutes
# reliability:              # for `hacfg plan`; unset, published figures apply (docs/plan.md)
#   node_mtbf: 264d         # one node's mean time between failures (Llama 3: 419 in 54 days on 2,048 nodes)
#   hang_share: 0.017       # the share of failures that are hangs (Llama 3: 7 of 419 watchdog timeouts)
#   restart_time: 10m       # from a failure to training again; `hacfg plan --from-events` measures it
"""

_NODES = {"single-node": 1, "multi-node": 2, "llm-long-term": 8}
_INTERVALS = {"single-node": "1h", "multi-node": "30m", "llm-long-term": "30m"}  # as the presets recommend


def starter(scenario: str) -> str:
    # the presets are the platform's recommended combinations (Table 4), so the commented block can quote them
    retries, unconditional, on_hang, pod_reschedules = ma.RECOMMENDED_RESTARTS[scenario]
    return _TEMPLATE.format(
        scenario=scenario,
        nodes=_NODES[scenario],
        interval=_INTERVALS[scenario],
        max=retries,
        unconditional=str(unconditional).lower(),
        on_hang=str(on_hang).lower(),
        pod_reschedules=pod_reschedules,
    )
