from django.conf import settings


def test_tests_keep_their_data_apart_from_the_app():
    assert settings.DATA_DIR.name.startswith("test"), settings.DATA_DIR
