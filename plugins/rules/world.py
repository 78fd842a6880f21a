"""The job's size: the ranks its launch asks for against its nodes and each node's cards."""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping
from typing import Any

from hacfg.plugin import JobContext, LogicalPath, Problem, Rule, ScenarioContext, hookimpl, rule
from hacfg.plugin import modelarts as ma

# What states a job's ranks. The environment: RANK_SIZE (Ascend: the devices in the rank table) and
# WORLD_SIZE (torch); the launcher's options: torchrun's (torch.distributed.run) and MindSpore's msrun.
WORLD_VARIABLES = ("RANK_SIZE", "WORLD_SIZE")
LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "msrun")
NODES_OPTIONS = ("--nnodes",)
PER_NODE_OPTIONS = ("--nproc_per_node", "--nproc-per-node", "--local_worker_num")
WORLD_OPTIONS = ("--worker_num",)
FLAGS = ("--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path", "--run_path")  # no value
SEPARATORS = ("&&", "||", ";", "|")


@rule("HA023", "ranks-disagree-with-nodes", "warning")
def ranks_disagree_with_nodes(ctx: ScenarioContext) -> Iterator[Problem]:
    """The ranks the job's launch asks for are not its nodes times each node's cards.

    ## What it does
    Compares the job's size, `job.nodes` nodes of `job.cards` cards (by default the count its
    `job.flavor` names: `modelarts.pool.visual.npu.8snt9b3.d` has 8), with what its environment
    and its command state: `RANK_SIZE` (the devices in an Ascend rank table) and `WORLD_SIZE`
    must be nodes × cards; torchrun's `--nnodes` must be `job.nodes`; torchrun's
    `--nproc_per_node` and msrun's `--local_worker_num` must be the cards of a node, and msrun's
    `--worker_num` nodes × cards; and a `job.cards` set beside a flavor that names its count
    must be that count. Reads request bodies the same way (`spec.resource.node_count`,
    `flavor_id`, `algorithm.environments`, `algorithm.command`). Stays quiet where the cards
    are unknown, or a value is not a plain number (`--nnodes 1:4`, `--nproc_per_node gpu`).

    ## Why is this bad?
    A collective library waits for every rank it was told of: told of more ranks than the job
    starts, it waits at initialisation until its timeout (HCCL's `EI0006`, torchrun's rendezvous
    timeout; msrun "will wait for a certain period of timeout" when fewer workers than
    `--worker_num` start, and refuses the extra ones when more do: MindSpore's msrun launching
    guide). Fewer processes than cards leave cards the job pays for idle; more than a node has
    cards fail to bind a device (reported as an error). The platform starts `job.nodes` nodes.

    ## Example
    ```yaml
    job:
      nodes: 2
      accelerator: npu
      flavor: modelarts.pool.visual.npu.8snt9b3.d
      environment: {RANK_SIZE: "8"}
    ```

    ## Fix
    Make them agree: `RANK_SIZE: "16"` for two nodes of eight cards, or `nodes: 1`; better, let
    the platform and the launcher set it (ModelArts writes `RANK_SIZE` and the rank table on
    Ascend, torchrun derives `WORLD_SIZE`).
    """
    job = ctx.config.job
    named = ma.read_flavor(job.flavor).cards if job.flavor and job.accelerator != "cpu" else None
    if job.cards is not None and named is not None and job.cards != named:
        over = job.cards > named
        message = f"job.cards {job.cards} but {job.flavor} has {named} card(s) per node: " + (
            "no node can give them" if over else f"{named - job.cards} card(s) per node left idle"
        )
        yield Problem(("job", "cards"), message, severity="error" if over else None)
    size = Size(job.nodes, job.cards_per_node, job.flavor if job.cards is None and job.flavor else "job.cards")
    yield from size.disagreements(ctx.environment, ctx.ENVIRONMENT, job.command, ("job", "command"))


@ranks_disagree_with_nodes.job
def ranks_disagree_with_nodes_in_body(ctx: JobContext) -> Iterator[Problem]:
    body = ctx.body
    nodes = body.node_count
    if nodes is None:
        return
    size = Size(nodes, ma.read_flavor(body.flavor).cards if body.flavor else None, body.flavor)
    command = body.get(("algorithm", "command"))
    yield from size.disagreements(
        ctx.environment, ctx.ENVIRONMENT, command if isinstance(command, str) else None, ("algorithm", "command")
    )


class Size:
    """A job's size: its nodes, each node's cards when known, and what says how many (a flavor id)."""

    __slots__ = ("cards", "cards_from", "nodes")

    def __init__(self, nodes: int, cards: int | None, cards_from: str) -> None:
        self.nodes = nodes
        self.cards = cards
        self.cards_from = cards_from

    def disagreements(
        self, environment: Mapping[Any, Any], env_at: LogicalPath, command: str | None, command_at: LogicalPath
    ) -> Iterator[Problem]:
        cards = self.cards or 0  # 0: unknown, and nothing that needs it is compared
        ranks = self.nodes * cards
        made = f"{self.nodes} node(s) of {cards} card(s) ({self.cards_from}) make {ranks} ranks: make them agree"
        for name in WORLD_VARIABLES:
            stated = _number(environment.get(name))
            if cards and stated is not None and stated != ranks:
                yield Problem((*env_at, name), f"{name} is {stated}, but {made}")
        for option, stated in launch_options(command or ""):
            if option in NODES_OPTIONS and stated != self.nodes:
                yield Problem(command_at, f"{option} {stated} but the job has {self.nodes} node(s): make them agree")
            elif option in PER_NODE_OPTIONS and cards and stated != cards:
                over = stated > cards
                message = f"{option} {stated} on nodes of {cards} card(s) ({self.cards_from}): " + (
                    "more processes than cards" if over else f"{cards - stated} card(s) per node left idle"
                )
                yield Problem(command_at, message, severity="error" if over else None)
            elif option in WORLD_OPTIONS and cards and stated != ranks:
                yield Problem(command_at, f"{option} is {stated}, but {made}")


def launch_options(command: str) -> Iterator[tuple[str, int]]:
    """The numeric options of each torchrun or msrun launch in ``command``, up to its script."""
    try:
        words = shlex.split(command)
    except ValueError:
        return  # unbalanced quotes: nothing can be read
    launched = False
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if word in SEPARATORS:
            launched = False
        elif not launched and " " in word:  # a shell's command string: bash -c "cd code && torchrun ..."
            yield from launch_options(word)
        elif not launched:
            launched = any(word == name or word.endswith(f"/{name}") for name in LAUNCHERS)
        elif word.startswith("-"):
            option, equals, value = word.partition("=")
            if not equals and option not in FLAGS and index < len(words) and not words[index].startswith("-"):
                value, index = words[index], index + 1
            if (number := _number(value)) is not None:
                yield option, number
        else:
            launched = False  # the script: what follows is its own arguments


def _number(value: object) -> int | None:
    text = str(value).strip() if isinstance(value, str | int) and not isinstance(value, bool) else ""
    return int(text) if text.isdigit() else None


@hookimpl
def hacfg_rules() -> list[Rule]:
    return [ranks_disagree_with_nodes]
