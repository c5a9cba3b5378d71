from django import template

from refunds import permissions

register = template.Library()
register.filter("reads_insights", permissions.oversees)
