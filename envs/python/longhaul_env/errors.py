"""The lh_err codes an env server answers with (common/common.h,
common/errors_envs.def), and EnvError, which carries one."""

LH_EINVAL = -2
LH_ENOENT = -4
LH_EUNSUPPORTED = -10
LH_EAGAIN = -12
LH_EENVS_CALL_EMPTY = -501
LH_EENVS_CALL_MALFORMED = -502
LH_EENVS_CALL_UNKNOWN_TOOL = -503
LH_EENVS_CALL_ARGS_TOO_LONG = -504
LH_EENVS_CALL_UNBALANCED = -505
LH_EENVS_CALL_NOT_UTF8 = -506
LH_EENVS_CALL_ANSWER_TOO_LONG = -507
LH_EENVS_CALL_TRAILING = -508
LH_EENVS_UNKNOWN_ENV = -510
LH_EENVS_BAD_OPTION = -511
LH_EENVS_NOT_RESET = -512
LH_EENVS_SERVER_PROTOCOL = -531
LH_EENVS_SERVER_REPLAY = -533
LH_EENVS_SERVER_BATCH = -534


class EnvError(Exception):
    """An error answered to the client: code (an lh_err value) and message."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class BadOption(EnvError):
    """An option the environment cannot take (raise it from reset)."""

    def __init__(self, message):
        super().__init__(LH_EENVS_BAD_OPTION, message)
