"""`minibroker zookeeper-security-migration`: Kafka 2.8's zookeeper-security-migration.sh (ZkSecurityMigrator).

Brokers started with zookeeper.set.acl=true secure only the znodes they create from then on;
this tool sets every existing Kafka znode to the ACL a secure (`--zookeeper.acl secure`) or
unsecure (`unsecure`) client would create it with (broker/zk/znode_acls.py): the chroot's root,
then each of ZkData.SecureRootPaths and everything under it, creating a missing root except
/controller. The credentials are the brokers' (KAFKA_OPTS naming the JAAS file, required in
both directions, as Kafka's tool requires them): only the identity holding a znode's ADMIN
permission may change its ACL. Kafka's order of steps applies: set KAFKA_OPTS and roll the
brokers, run this with `secure`, then roll them again with zookeeper.set.acl=true.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from broker.tools.tool_support import ZK_AUTH_HELP, fail
from broker.zk import layout as L
from broker.zk.client import NoAuthError, NoNodeError, ZkClient, ZkError
from broker.zk.jaas import LOGIN_CONFIG_PROPERTY, JaasError, credentials_from_env
from broker.zk.znode_acls import SECURE_ROOTS

# Znodes whose ACLs are set at once (Kafka's tool sends all its requests asynchronously).
CONCURRENCY = 32


async def run(args: argparse.Namespace) -> int:
    if args.zookeeper_acl not in ("secure", "unsecure"):
        return fail("--zookeeper.acl must be secure or unsecure")
    try:
        credentials = credentials_from_env(os.environ)
    except JaasError as e:
        return fail(str(e))
    if credentials is None:
        return fail(f"No JAAS configuration with ZooKeeper credentials: set KAFKA_OPTS=-D{LOGIN_CONFIG_PROPERTY}=FILE "
                    "naming a JAAS file whose Client section has username and password (the brokers' ones)")
    zk = ZkClient(args.zookeeper_connect, args.zookeeper_session_timeout, credentials=credentials,
                  secure_acls=args.zookeeper_acl == "secure")
    try:
        await zk.start(timeout=args.zookeeper_connection_timeout / 1000)
    except ZkError as e:
        return fail(f"cannot connect to ZooKeeper at {args.zookeeper_connect}: {e}")
    try:
        missing = [p for p in SECURE_ROOTS if not await zk.exists(p)]
        if missing:
            print(f"Warning: The following secure root paths do not exist in ZooKeeper: {','.join(missing)}")
            print("That might be due to an incorrect chroot is specified when executing the command.")
            if args.enable_path_check:
                print("Exit the command.")
                return 1
        await zk.set_default_acl("/")
        roots = []
        for root in SECURE_ROOTS:
            if root == L.CONTROLLER and root in missing:
                continue  # an ephemeral: the next controller creates it with its own ACL
            await zk.ensure_path(root)
            roots.append(root)
        changed = await _set_trees(zk, roots)
        print(f"Set {args.zookeeper_acl} ACLs on {changed + 1} znodes.")
        return 0
    except NoAuthError as e:
        return fail(f"{e}: ZooKeeper refused it for this client's identity (are these the brokers' credentials?)")
    finally:
        await zk.close()


async def _set_trees(zk: ZkClient, roots: list[str]) -> int:
    """Sets the ACL of every znode in the trees under `roots`; how many it set."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for root in roots:
        queue.put_nowait(root)
    done = 0

    async def worker() -> None:
        nonlocal done
        while True:
            path = await queue.get()
            try:
                await zk.set_default_acl(path)
                done += 1
                for child in await zk.get_children(path):
                    queue.put_nowait(f"{path}/{child}")
            except NoNodeError:
                pass  # deleted meanwhile, as Kafka's tool tolerates
            finally:
                queue.task_done()

    workers = [asyncio.create_task(worker()) for _ in range(CONCURRENCY)]
    joined = asyncio.create_task(queue.join())
    try:
        # A worker's failure (NoAuth, ZooKeeper gone) ends the walk instead of leaving it waiting.
        await asyncio.wait([joined, *workers], return_when=asyncio.FIRST_COMPLETED)
        for w in workers:
            error = w.exception() if w.done() and not w.cancelled() else None
            if error is not None:
                raise error
    finally:
        for task in (*workers, joined):
            task.cancel()
    return done


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("zookeeper-security-migration",
                       help="set the ACLs of existing znodes to secure or unsecure (zookeeper-security-migration)",
                       epilog=ZK_AUTH_HELP)
    p.add_argument("--zookeeper.acl", dest="zookeeper_acl", required=True, choices=["secure", "unsecure"],
                   help="make the Kafka znodes in ZooKeeper secure or unsecure")
    p.add_argument("--zookeeper.connect", dest="zookeeper_connect", default="localhost:2181",
                   help="host:port[,host:port][/chroot]")
    p.add_argument("--zookeeper.session.timeout", dest="zookeeper_session_timeout", type=int, default=30000)
    p.add_argument("--zookeeper.connection.timeout", dest="zookeeper_connection_timeout", type=int, default=30000)
    p.add_argument("--enable.path.check", dest="enable_path_check", action="store_true",
                   help="exit if any of the root paths is missing from ZooKeeper")
