"""several manager processes on one database

``change_log_clock``: the newest change-log timestamp, raised by writers under the database's
change-log lock (seeded with the newest row of kafka_user and kafka_acl, so stamps keep
increasing over an upgrade). ``key_check``: proof of the secret_key and encryption_key the
database is served with, filled by the first process that starts.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    clock = op.create_table('change_log_clock',
    sa.Column('id', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('last_stamp', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('key_check',
    sa.Column('id', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('secret_key_hmac', sa.String(length=64), nullable=False),
    sa.Column('encryption_key_token', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    bind = op.get_bind()
    newest = max(bind.execute(sa.text('SELECT max(create_time) FROM kafka_user')).scalar() or 0,
                 bind.execute(sa.text('SELECT max(create_time) FROM kafka_acl')).scalar() or 0)
    op.bulk_insert(clock, [{'id': 1, 'last_stamp': newest}])


def downgrade() -> None:
    op.drop_table('key_check')
    op.drop_table('change_log_clock')
