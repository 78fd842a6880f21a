"""The scenario model's core schema, pruned for hacfg.scenario.fastcheck.

Generated from hacfg.scenario.model by `python -m hacfg.scenario.validation`; do not edit.
"""

import re
from datetime import timedelta

from hacfg.scenario import model

SCHEMA = {
    'type': 'dataclass',
    'cls': model.HAConfig,
    'forbid_extra': True,
    'fields': [
        {
            'name': 'version',
            'schema': {
                'type': 'literal',
                'expected': [
                    1,
                ],
            },
        },
        {
            'name': 'scenario',
            'schema': {
                'type': 'literal',
                'expected': [
                    'single-node',
                    'multi-node',
                    'llm-long-term',
                ],
            },
        },
        {
            'name': 'platform',
            'default': 'huaweicloud',
            'schema': {
                'type': 'literal',
                'expected': [
                    'huaweicloud',
                    'otc',
                ],
            },
        },
        {
            'name': 'extends',
            'default': None,
            'schema': {
                'type': 'nullable',
                'schema': {
                    'type': 'str',
                },
            },
        },
        {
            'name': 'job',
            'default_factory': model.Job,
            'schema': {
                'type': 'dataclass',
                'cls': model.Job,
                'forbid_extra': True,
                'fields': [
                    {
                        'name': 'name',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'str',
                                'pattern': '^[A-Za-z0-9_-]{1,64}$',
                                'compiled': re.compile('^[A-Za-z0-9_-]{1,64}$'),
                            },
                        },
                    },
                    {
                        'name': 'nodes',
                        'default': 1,
                        'schema': {
                            'type': 'int',
                            'ge': 1,
                        },
                    },
                    {
                        'name': 'accelerator',
                        'default': 'gpu',
                        'schema': {
                            'type': 'literal',
                            'expected': [
                                'gpu',
                                'npu',
                                'cpu',
                            ],
                        },
                    },
                    {
                        'name': 'network',
                        'default': 'ethernet',
                        'schema': {
                            'type': 'literal',
                            'expected': [
                                'infiniband',
                                'roce',
                                'ethernet',
                            ],
                        },
                    },
                    {
                        'name': 'image',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'str',
                            },
                        },
                    },
                    {
                        'name': 'command',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'str',
                            },
                        },
                    },
                    {
                        'name': 'flavor',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'str',
                            },
                        },
                    },
                    {
                        'name': 'cards',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'int',
                                'ge': 0,
                            },
                        },
                    },
                    {
                        'name': 'pool',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'str',
                            },
                        },
                    },
                    {
                        'name': 'environment',
                        'default_factory': dict,
                        'schema': {
                            'type': 'function-before',
                            'function': model.numbers_as_strings,
                            'info': False,
                            'schema': {
                                'type': 'dict',
                                'keys_schema': {
                                    'type': 'str',
                                },
                                'values_schema': {
                                    'type': 'str',
                                },
                            },
                        },
                    },
                    {
                        'name': 'duration',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'function-before',
                                'function': model.parse_duration,
                                'info': False,
                                'schema': {
                                    'type': 'timedelta',
                                },
                            },
                        },
                    },
                ],
            },
        },
        {
            'name': 'checkpoint',
            'default_factory': model.Checkpoint,
            'schema': {
                'type': 'dataclass',
                'cls': model.Checkpoint,
                'forbid_extra': True,
                'fields': [
                    {
                        'name': 'path',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'str',
                            },
                        },
                    },
                    {
                        'name': 'interval',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'function-before',
                                'function': model.parse_duration,
                                'info': False,
                                'schema': {
                                    'type': 'timedelta',
                                },
                            },
                        },
                    },
                    {
                        'name': 'resume',
                        'default': False,
                        'schema': {
                            'type': 'bool',
                        },
                    },
                    {
                        'name': 'save_time',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'function-before',
                                'function': model.parse_duration,
                                'info': False,
                                'schema': {
                                    'type': 'timedelta',
                                },
                            },
                        },
                    },
                ],
            },
        },
        {
            'name': 'restart',
            'default_factory': model.Restart,
            'schema': {
                'type': 'dataclass',
                'cls': model.Restart,
                'forbid_extra': True,
                'fields': [
                    {
                        'name': 'max',
                        'default': 0,
                        'schema': {
                            'type': 'function-after',
                            'function': model.within_platform_limits,
                            'info': True,
                            'schema': {
                                'type': 'int',
                                'ge': 0,
                                'le': 128,
                            },
                        },
                    },
                    {
                        'name': 'unconditional',
                        'default': False,
                        'schema': {
                            'type': 'bool',
                        },
                    },
                    {
                        'name': 'on_hang',
                        'default': False,
                        'schema': {
                            'type': 'bool',
                        },
                    },
                    {
                        'name': 'pod_reschedules',
                        'default': 0,
                        'schema': {
                            'type': 'int',
                            'ge': 0,
                        },
                    },
                ],
            },
        },
        {
            'name': 'hang',
            'default_factory': model.Hang,
            'schema': {
                'type': 'dataclass',
                'cls': model.Hang,
                'forbid_extra': True,
                'fields': [
                    {
                        'name': 'detect',
                        'default': True,
                        'schema': {
                            'type': 'bool',
                        },
                    },
                    {
                        'name': 'timeout',
                        'default': timedelta(seconds=1800.0),
                        'schema': {
                            'type': 'function-before',
                            'function': model.parse_duration,
                            'info': False,
                            'schema': {
                                'type': 'timedelta',
                            },
                        },
                    },
                    {
                        'name': 'phases',
                        'default_factory': dict,
                        'schema': {
                            'type': 'dict',
                            'keys_schema': {
                                'type': 'str',
                                'pattern': '^[A-Za-z0-9_.-]{1,64}$',
                                'compiled': re.compile('^[A-Za-z0-9_.-]{1,64}$'),
                            },
                            'values_schema': {
                                'type': 'function-before',
                                'function': model.parse_duration,
                                'info': False,
                                'schema': {
                                    'type': 'timedelta',
                                },
                            },
                        },
                    },
                    {
                        'name': 'learn',
                        'default': False,
                        'schema': {
                            'type': 'bool',
                        },
                    },
                    {
                        'name': 'learn_floor',
                        'default': timedelta(seconds=60.0),
                        'schema': {
                            'type': 'function-before',
                            'function': model.parse_duration,
                            'info': False,
                            'schema': {
                                'type': 'timedelta',
                            },
                        },
                    },
                    {
                        'name': 'learn_beyond_timeout',
                        'default': False,
                        'schema': {
                            'type': 'bool',
                        },
                    },
                ],
            },
        },
        {
            'name': 'reliability',
            'default_factory': model.Reliability,
            'schema': {
                'type': 'dataclass',
                'cls': model.Reliability,
                'forbid_extra': True,
                'fields': [
                    {
                        'name': 'node_mtbf',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'function-before',
                                'function': model.parse_duration,
                                'info': False,
                                'schema': {
                                    'type': 'timedelta',
                                },
                            },
                        },
                    },
                    {
                        'name': 'hang_share',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'float',
                                'ge': 0,
                                'le': 1,
                            },
                        },
                    },
                    {
                        'name': 'restart_time',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'function-before',
                                'function': model.parse_duration,
                                'info': False,
                                'schema': {
                                    'type': 'timedelta',
                                },
                            },
                        },
                    },
                ],
            },
        },
        {
            'name': 'kubernetes',
            'default_factory': model.Kubernetes,
            'schema': {
                'type': 'dataclass',
                'cls': model.Kubernetes,
                'forbid_extra': True,
                'fields': [
                    {
                        'name': 'restart_strategy',
                        'default': 'Recreate',
                        'schema': {
                            'type': 'literal',
                            'expected': [
                                'Recreate',
                                'BlockingRecreate',
                                'InPlaceRestart',
                            ],
                        },
                    },
                    {
                        'name': 'service_account',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'str',
                            },
                        },
                    },
                    {
                        'name': 'runtime',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'str',
                            },
                        },
                    },
                    {
                        'name': 'checkpoint_claim',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'str',
                            },
                        },
                    },
                    {
                        'name': 'device_resource',
                        'default': None,
                        'schema': {
                            'type': 'nullable',
                            'schema': {
                                'type': 'literal',
                                'expected': [
                                    'nvidia.com/gpu',
                                    'huawei.com/Ascend910',
                                    'huawei.com/Ascend310P',
                                    'huawei.com/Ascend310',
                                ],
                            },
                        },
                    },
                    {
                        'name': 'shm_size',
                        'default': '2Gi',
                        'schema': {
                            'type': 'function-after',
                            'function': model.above_shm_precheck,
                            'info': False,
                            'schema': {
                                'type': 'str',
                                'pattern': '^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$',
                                'compiled': re.compile('^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$'),
                            },
                        },
                    },
                    {
                        'name': 'secrets',
                        'default_factory': dict,
                        'schema': {
                            'type': 'dict',
                            'keys_schema': {
                                'type': 'str',
                                'pattern': '^[A-Za-z_][A-Za-z0-9_]*$',
                                'compiled': re.compile('^[A-Za-z_][A-Za-z0-9_]*$'),
                            },
                            'values_schema': {
                                'type': 'dataclass',
                                'cls': model.SecretKey,
                                'forbid_extra': True,
                                'fields': [
                                    {
                                        'name': 'name',
                                        'schema': {
                                            'type': 'str',
                                            'pattern': '^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$',
                                            'compiled': re.compile('^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$'),
                                        },
                                    },
                                    {
                                        'name': 'key',
                                        'schema': {
                                            'type': 'str',
                                            'pattern': '^[-._a-zA-Z0-9]+$',
                                            'compiled': re.compile('^[-._a-zA-Z0-9]+$'),
                                        },
                                    },
                                ],
                            },
                        },
                    },
                    {
                        'name': 'network_policy',
                        'default': False,
                        'schema': {
                            'type': 'bool',
                        },
                    },
                ],
            },
        },
        {
            'name': 'operator_retry',
            'default': False,
            'schema': {
                'type': 'bool',
            },
        },
        {
            'name': 'precheck',
            'default': True,
            'schema': {
                'type': 'bool',
            },
        },
        {
            'name': 'passthrough',
            'default_factory': dict,
            'schema': {
                'type': 'dict',
                'keys_schema': {
                    'type': 'str',
                },
                'values_schema': {
                    'type': 'any',
                },
            },
        },
    ],
}
