"""gateway processes and deletion-proof discovery versions

``gateway_config_version``: the highest version given to each discovery setting type, raised
on deletes too (seeded with each type's newest row). ``gateway_instance``: the gateway
processes that pull the discovery settings.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    versions = op.create_table('gateway_config_version',
    sa.Column('type', sa.String(length=32), nullable=False),
    sa.Column('version', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('type')
    )
    op.create_table('gateway_instance',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('address', sa.String(length=64), nullable=False),
    sa.Column('instance_id', sa.String(length=128), nullable=False),
    sa.Column('sync_interval_ms', sa.BigInteger(), nullable=True),
    sa.Column('version', sa.BigInteger(), nullable=False),
    sa.Column('first_pull_ms', sa.BigInteger(), nullable=False),
    sa.Column('last_pull_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('address', 'instance_id', name='uq_gateway_instance')
    )
    rows = op.get_bind().execute(sa.text('SELECT type, max(version) FROM gateway_config GROUP BY type')).all()
    op.bulk_insert(versions, [{'type': kind, 'version': int(top)} for kind, top in rows])


def downgrade() -> None:
    op.drop_table('gateway_instance')
    op.drop_table('gateway_config_version')
