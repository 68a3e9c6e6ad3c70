<?php

declare(strict_types=1);

namespace App;

use Symfony\Bundle\FrameworkBundle\Kernel\MicroKernelTrait;
use Symfony\Component\DependencyInjection\Loader\Configurator\ContainerConfigurator;
use Symfony\Component\HttpKernel\Kernel as BaseKernel;
use Symfony\Component\Routing\Loader\Configurator\RoutingConfigurator;

final class Kernel extends BaseKernel
{
    use MicroKernelTrait;

    public function registerBundles(): iterable
    {
        yield new \Symfony\Bundle\FrameworkBundle\FrameworkBundle();
        yield new \Symfony\Bundle\SecurityBundle\SecurityBundle();
    }

    /** The app's root (Symfony looks for a composer.json, which a Debian-packaged app lacks). */
    public function getProjectDir(): string
    {
        return \dirname(__DIR__);
    }

    /** The cache and logs go to VAR_DIR when set (tests, read-only deploys), else var/. */
    public function getCacheDir(): string
    {
        return ($_SERVER['VAR_DIR'] ?? $this->getProjectDir() . '/var') . '/cache/' . $this->environment;
    }

    public function getLogDir(): string
    {
        return ($_SERVER['VAR_DIR'] ?? $this->getProjectDir() . '/var') . '/log';
    }

    private function configureContainer(ContainerConfigurator $container): void
    {
        $container->import($this->getProjectDir() . '/config/{packages}/*.php');
        $container->import($this->getProjectDir() . '/config/services.php');
    }

    private function configureRoutes(RoutingConfigurator $routes): void
    {
        $routes->import($this->getProjectDir() . '/config/{routes}/*.php');
    }
}
