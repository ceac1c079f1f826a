"""nbgrader settings of every server on the course's hub (the hub puts this folder on JUPYTER_CONFIG_PATH)."""

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "hwopt"
# The exchange: one folder that every account can reach, made once by the hub's administrator
# (mkdir -p /srv/nbgrader/exchange && chmod ugo+rwx /srv/nbgrader/exchange). nbgrader keeps each student's
# submissions unreadable to the others by their files' permissions; its timestamps are in UTC.
c.Exchange.root = "/srv/nbgrader/exchange"
c.Exchange.timezone = "UTC"
# The exchange's collect is the course's (nbgrader_config.py in the course folder: ExchangeCollect).
