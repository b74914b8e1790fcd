"""ament_python package fl_uav."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = 'fl_uav'
NODES = ['ground_station_node', 'drone_node', 'sim_camera_node', 'autopilot_sim_node',
         'ground_client_node', 'camera_node']

setup(
    name=PACKAGE,
    version='0.1.0',
    packages=find_packages(exclude=['test', 'test.*']),
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + PACKAGE]),
        ('share/' + PACKAGE, ['package.xml']),
        ('share/' + PACKAGE + '/launch', glob('launch/*.launch.py')),
        ('share/' + PACKAGE + '/config', glob('config/*.yaml') + glob('config/*.rviz')),
        ('share/' + PACKAGE + '/config/experiments', glob('config/experiments/*.yaml')),
        ('share/' + PACKAGE + '/config/plans', glob('config/plans/*.yaml')),
        ('share/' + PACKAGE + '/sim', glob('sim/*.md')),
        ('share/' + PACKAGE + '/sim/worlds', glob('sim/worlds/*.sdf')),
        # the ground texture, where the world's SDF names it (relative to the SDF file)
        ('share/' + PACKAGE + '/sim/worlds/landcover_ground/materials/textures',
         glob('sim/worlds/landcover_ground/materials/textures/*.png')),
    ],
    install_requires=['setuptools'],
    # engine.backend ray (requirements-ray.txt; `make install` installs it)
    extras_require={'ray': ['ray==2.60.0']},
    zip_safe=False,
    maintainer='fl_uav maintainers',
    maintainer_email='fl-uav@example.org',
    description='Federated learning on UAV fleets over ROS 2 and MAVLink.',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [f'{node} = {PACKAGE}.ros.{node}:main' for node in NODES]
        + ['fl-uav = fl_uav.cli:main'],
    },
)
