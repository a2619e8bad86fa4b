"""initial schema

Accounts, clusters, applications, permissions and their change logs for
the brokers, permission requests, quotas, connection reports, discovery settings, audit log.

Seeds the three discovery rate settings Logi-KafkaManager ships (100000000 each, version 1).

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('account',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('username', sa.String(length=64), nullable=False),
    sa.Column('password_hash', sa.String(length=255), nullable=False),
    sa.Column('role', sa.String(length=16), nullable=False),
    sa.Column('active', sa.Boolean(), nullable=False),
    sa.Column('created_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('username')
    )
    op.create_table('app',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('app_id', sa.String(length=64), nullable=False),
    sa.Column('password_enc', sa.Text(), nullable=False),
    sa.Column('description', sa.String(length=1024), nullable=False),
    sa.Column('super_user', sa.Boolean(), nullable=False),
    sa.Column('created_by', sa.String(length=64), nullable=False),
    sa.Column('created_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('app_id')
    )
    op.create_table('audit_record',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('at_ms', sa.BigInteger(), nullable=False),
    sa.Column('actor', sa.String(length=64), nullable=False),
    sa.Column('action', sa.String(length=64), nullable=False),
    sa.Column('target', sa.String(length=512), nullable=False),
    sa.Column('detail', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('audit_record', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_audit_record_at_ms'), ['at_ms'], unique=False)

    op.create_table('cluster',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('bootstrap_servers', sa.String(length=1024), nullable=False),
    sa.Column('zookeeper_connect', sa.String(length=1024), nullable=True),
    sa.Column('security_protocol', sa.String(length=32), nullable=False),
    sa.Column('sasl_mechanism', sa.String(length=32), nullable=True),
    sa.Column('sasl_username', sa.String(length=255), nullable=True),
    sa.Column('sasl_password_enc', sa.Text(), nullable=True),
    sa.Column('created_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.create_table('gateway_config',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('type', sa.String(length=32), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('value', sa.String(length=4096), nullable=False),
    sa.Column('version', sa.BigInteger(), nullable=False),
    sa.Column('description', sa.String(length=1024), nullable=False),
    sa.Column('modified_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('type', 'name')
    )
    op.create_table('kafka_acl',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('app_id', sa.String(length=64), nullable=False),
    sa.Column('cluster_id', sa.Integer(), nullable=False),
    sa.Column('topic_name', sa.String(length=249), nullable=False),
    sa.Column('access', sa.Integer(), nullable=False),
    sa.Column('operation', sa.Integer(), nullable=False),
    sa.Column('create_time', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('kafka_acl', schema=None) as batch_op:
        batch_op.create_index('ix_kafka_acl_cluster_time', ['cluster_id', 'create_time'], unique=False)

    op.create_table('kafka_user',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('app_id', sa.String(length=64), nullable=False),
    sa.Column('password_enc', sa.Text(), nullable=False),
    sa.Column('user_type', sa.Integer(), nullable=False),
    sa.Column('operation', sa.Integer(), nullable=False),
    sa.Column('create_time', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('kafka_user', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_kafka_user_create_time'), ['create_time'], unique=False)

    op.create_table('topic_connections',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('app_id', sa.String(length=64), nullable=False),
    sa.Column('cluster_id', sa.Integer(), nullable=False),
    sa.Column('topic_name', sa.String(length=249), nullable=False),
    sa.Column('type', sa.String(length=16), nullable=False),
    sa.Column('ip', sa.String(length=64), nullable=False),
    sa.Column('client_version', sa.String(length=32), nullable=False),
    sa.Column('client_id', sa.String(length=255), nullable=True),
    sa.Column('broker_id', sa.Integer(), nullable=True),
    sa.Column('create_time', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('app_id', 'cluster_id', 'topic_name', 'type', 'ip', 'client_version', name='uq_topic_connections')
    )
    with op.batch_alter_table('topic_connections', schema=None) as batch_op:
        batch_op.create_index('ix_topic_connections_time', ['cluster_id', 'create_time'], unique=False)

    op.create_table('app_owner',
    sa.Column('app_id', sa.String(length=64), nullable=False),
    sa.Column('account_id', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['account_id'], ['account.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['app_id'], ['app.app_id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('app_id', 'account_id')
    )
    op.create_table('authority',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('app_id', sa.String(length=64), nullable=False),
    sa.Column('cluster_id', sa.Integer(), nullable=False),
    sa.Column('topic_name', sa.String(length=249), nullable=False),
    sa.Column('access', sa.Integer(), nullable=False),
    sa.Column('modified_ms', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['app_id'], ['app.app_id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['cluster_id'], ['cluster.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('app_id', 'cluster_id', 'topic_name')
    )
    op.create_table('permission_request',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('app_id', sa.String(length=64), nullable=False),
    sa.Column('cluster_id', sa.Integer(), nullable=False),
    sa.Column('topic_name', sa.String(length=249), nullable=False),
    sa.Column('access', sa.Integer(), nullable=False),
    sa.Column('reason', sa.String(length=1024), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('requested_by', sa.String(length=64), nullable=False),
    sa.Column('requested_ms', sa.BigInteger(), nullable=False),
    sa.Column('decided_by', sa.String(length=64), nullable=True),
    sa.Column('decided_ms', sa.BigInteger(), nullable=True),
    sa.Column('decision_reason', sa.String(length=1024), nullable=True),
    sa.ForeignKeyConstraint(['app_id'], ['app.app_id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['cluster_id'], ['cluster.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('permission_request', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_permission_request_status'), ['status'], unique=False)

    op.create_table('quota',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('app_id', sa.String(length=64), nullable=False),
    sa.Column('cluster_id', sa.Integer(), nullable=False),
    sa.Column('topic_name', sa.String(length=249), nullable=False),
    sa.Column('producer_byte_rate', sa.Float(), nullable=True),
    sa.Column('consumer_byte_rate', sa.Float(), nullable=True),
    sa.Column('modified_ms', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['app_id'], ['app.app_id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['cluster_id'], ['cluster.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('app_id', 'cluster_id', 'topic_name')
    )
    op.create_table('topic_report',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('cluster_id', sa.Integer(), nullable=False),
    sa.Column('topic_name', sa.String(length=249), nullable=False),
    sa.Column('start_time', sa.BigInteger(), nullable=False),
    sa.Column('end_time', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['cluster_id'], ['cluster.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('cluster_id', 'topic_name')
    )

    gateway_config = sa.table("gateway_config", sa.column("type", sa.String), sa.column("name", sa.String),
                              sa.column("value", sa.String), sa.column("version", sa.BigInteger),
                              sa.column("description", sa.String), sa.column("modified_ms", sa.BigInteger))
    op.bulk_insert(gateway_config, [
        {"type": kind, "name": kind, "value": "100000000", "version": 1, "description": what, "modified_ms": 0}
        for kind, what in (("SD_QUEUE_SIZE", "max requests queued per broker"),
                           ("SD_APP_RATE", "default requests/s per application"),
                           ("SD_IP_RATE", "default requests/s per client address"))])


def downgrade() -> None:
    op.drop_table('topic_report')
    op.drop_table('quota')
    with op.batch_alter_table('permission_request', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_permission_request_status'))

    op.drop_table('permission_request')
    op.drop_table('authority')
    op.drop_table('app_owner')
    with op.batch_alter_table('topic_connections', schema=None) as batch_op:
        batch_op.drop_index('ix_topic_connections_time')

    op.drop_table('topic_connections')
    with op.batch_alter_table('kafka_user', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_kafka_user_create_time'))

    op.drop_table('kafka_user')
    with op.batch_alter_table('kafka_acl', schema=None) as batch_op:
        batch_op.drop_index('ix_kafka_acl_cluster_time')

    op.drop_table('kafka_acl')
    op.drop_table('gateway_config')
    op.drop_table('cluster')
    with op.batch_alter_table('audit_record', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_audit_record_at_ms'))

    op.drop_table('audit_record')
    op.drop_table('app')
    op.drop_table('account')
